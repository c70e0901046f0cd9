"""The tensor layer without a GPU, where torch is installed (skipped where it is not): shapes read
from tensors, outputs' shapes and dtypes from the custom ops' fake implementations on meta
tensors, and the checks that refuse tensors before anything launches."""

import pytest

import gmjit

torch = pytest.importorskip("torch")
gmjit.register_torch_ops()


def meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


@pytest.mark.parametrize("call, shape, dtype", [
    (lambda: torch.ops.gmjit.softmax(meta(4, 31, 100)), (4, 31, 100), torch.float32),
    (lambda: torch.ops.gmjit.rmsnorm(meta(8, 64, dtype=torch.bfloat16), meta(64, dtype=torch.bfloat16)),
     (8, 64), torch.bfloat16),
    (lambda: torch.ops.gmjit.gemm(meta(67, 200, dtype=torch.bfloat16), meta(129, 200, dtype=torch.bfloat16),
                                  trans_b=1), (67, 129), torch.bfloat16),
    (lambda: torch.ops.gmjit.gemm(meta(67, 200, dtype=torch.float16), meta(200, 129, dtype=torch.float16),
                                  trans_b=0), (67, 129), torch.float16),
    (lambda: torch.ops.gmjit.sgemm(meta(5, 7), meta(7, 3)), (5, 3), torch.float32),
    (lambda: torch.ops.gmjit.transpose(meta(129, 67)), (67, 129), torch.float32),
    (lambda: torch.ops.gmjit.grayscale(meta(37, 61, 3)), (37, 61), torch.float32),
    (lambda: torch.ops.gmjit.vector_sum(meta(1000)), (1,), torch.float32),
    (lambda: torch.ops.gmjit.prefix_sum(meta(1000)), (1000,), torch.float32),
])
def test_fake_outputs_have_the_kernels_shapes_and_dtypes(call, shape, dtype):
    out = call()
    assert tuple(out.shape) == shape and out.dtype == dtype


def test_histogram_counts_are_256_int64_as_torch_counts_are():
    counts = torch.ops.gmjit.histogram(meta(1000, dtype=torch.uint8))
    assert tuple(counts.shape) == (256,)
    assert counts.dtype == torch.int64


@pytest.mark.skipif(not hasattr(torch, "uint32"), reason="this torch has no uint32")
def test_histogram_counts_in_u32_on_request():
    counts = torch.ops.gmjit.histogram(meta(1000, dtype=torch.uint8), i64_counts=0)
    assert tuple(counts.shape) == (256,) and counts.dtype == torch.uint32


def test_shapes_that_disagree_are_usage_errors():
    with pytest.raises(gmjit.UsageError, match="weight has 63 elements"):
        torch.ops.gmjit.rmsnorm(meta(8, 64), meta(63))
    with pytest.raises(gmjit.UsageError, match="not a multiple"):
        torch.ops.gmjit.sgemm(meta(5, 7), meta(10))


def test_cpu_tensors_are_refused_naming_the_tensor():
    with pytest.raises(gmjit.UsageError, match="a is on cpu"):
        gmjit.vector_add(torch.ones(4), torch.ones(4))
