"""Every catalog kernel on torch tensors against torch's own operator, computed in float64 where
it matters: fresh random inputs (never zeros), outputs poisoned with NaN, odd sizes; and the
argument checks that must fire before anything launches."""

import pytest

import gmjit
from conftest import require_gpu

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch(tmp_path_factory):
    torch = require_gpu()
    gmjit.configure(cache=str(tmp_path_factory.mktemp("cache") / "gmjit.db"), miss_policy="default_config")
    torch.manual_seed(0)
    return torch


def rand(torch, *shape, dtype="float32"):
    x = torch.rand(*shape, dtype=torch.float64, device="cuda") * 1.5 + 0.25
    sign = torch.where(torch.rand(*shape, device="cuda") < 0.5, -1.0, 1.0).double()
    return (x * sign).to(getattr(torch, dtype))


def poisoned(torch, shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


def close(torch, got, want, rtol, atol):
    assert not torch.isnan(got).any(), "an output element was never written"
    torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=atol)


TOLERANCE = {"float32": (1e-5, 1e-5), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_vector_add(torch, dtype):
    a, b = rand(torch, 100003, dtype=dtype), rand(torch, 100003, dtype=dtype)
    out = poisoned(torch, a.shape, a.dtype)
    assert gmjit.vector_add(a, b, out=out) is out
    close(torch, out, a.double() + b.double(), *TOLERANCE[dtype])
    assert gmjit.launch("vector_add", a, b).shape == a.shape


def test_sgemm(torch):
    a, b = rand(torch, 127, 33), rand(torch, 33, 65)
    c = gmjit.sgemm(a, b)
    assert c.shape == (127, 65)
    close(torch, c, a.double() @ b.double(), 1e-4, 1e-4)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm(torch, dtype, trans_b):
    m, n, k = 67, 129, 200
    a = rand(torch, m, k, dtype=dtype)
    b = rand(torch, n, k, dtype=dtype) if trans_b else rand(torch, k, n, dtype=dtype)
    c = gmjit.gemm(a, b, trans_b=trans_b)
    want = a.double() @ (b.double().T if trans_b else b.double())
    assert c.shape == (m, n) and c.dtype == a.dtype
    close(torch, c, want, 2e-2, 0.5)


def test_grayscale(torch):
    rgb = rand(torch, 37, 61, 3)
    out = gmjit.grayscale(rgb)
    want = rgb.double() @ torch.tensor([0.2989, 0.5870, 0.1140], dtype=torch.float64, device="cuda")
    assert out.shape == (37, 61)
    close(torch, out, want, 1e-5, 1e-5)


def test_transpose(torch):
    x = rand(torch, 129, 67)
    out = gmjit.transpose(x)
    assert out.shape == (67, 129)
    close(torch, out, x.T, 0, 0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("shape", [(127, 1000), (4, 31, 100)])
def test_softmax(torch, dtype, shape):
    x = rand(torch, *shape, dtype=dtype)
    y = gmjit.softmax(x)
    assert y.shape == x.shape
    close(torch, y, torch.softmax(x.double(), dim=-1), *TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_rmsnorm(torch, dtype):
    x, w = rand(torch, 3, 41, 1000, dtype=dtype), rand(torch, 1000, dtype=dtype)
    y = gmjit.rmsnorm(x, w)
    xd = x.double()
    want = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-5) * w.double()
    close(torch, y, want, *TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_layernorm(torch, dtype):
    x, w, b = rand(torch, 127, 1000, dtype=dtype), rand(torch, 1000, dtype=dtype), rand(torch, 1000, dtype=dtype)
    y = gmjit.layernorm(x, w, b)
    want = torch.nn.functional.layer_norm(x.double(), (1000,), w.double(), b.double(), 1e-5)
    close(torch, y, want, *TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_expressions(torch, dtype):
    short = {"float32": "fp32", "bfloat16": "bf16"}[dtype]
    silu_mul = gmjit.expression("y = silu(a) * b", dtype=short)
    a, b = rand(torch, 3, 37, 129, dtype=dtype), rand(torch, 3, 37, 129, dtype=dtype)
    y = silu_mul(a, b)
    assert y.shape == a.shape and y.dtype == a.dtype
    close(torch, y, torch.nn.functional.silu(a.double()) * b.double(), *TOLERANCE[dtype])

    rmsnorm = gmjit.expression(f"w: {short}[cols]; y = x * rsqrt(mean(x * x) + 1e-6) * w", dtype=short,
                               name=f"py_rmsnorm_{short}")
    x, w = rand(torch, 65, 1000, dtype=dtype), rand(torch, 1000, dtype=dtype)
    out = poisoned(torch, x.shape, x.dtype)
    assert rmsnorm(w, x, out=out) is out
    xd = x.double()
    want = xd * torch.rsqrt((xd * xd).mean(-1, keepdim=True) + 1e-6) * w.double()
    close(torch, out, want, *TOLERANCE[dtype])
    with pytest.raises(gmjit.UsageError, match="x has"):
        rmsnorm(w, rand(torch, 65, 999, dtype=dtype))


def test_vector_sum(torch):
    x = rand(torch, 1000003)
    y = gmjit.vector_sum(x)
    close(torch, y.reshape(()), x.double().sum(), 1e-6, 1e-6)


def test_histogram(torch):
    x = torch.randint(0, 256, (100003,), dtype=torch.uint8, device="cuda")
    want = torch.bincount(x.long(), minlength=256)
    counts = gmjit.histogram(x)
    assert counts.dtype == torch.int64 and counts.shape == (256,), "torch's dtype for counts, from one kernel"
    assert torch.equal(counts, want)
    # Into a given int64 tensor, and in u32 where `out` asks for it.
    out = torch.full((256,), -7, dtype=torch.int64, device="cuda")
    assert gmjit.histogram(x, out=out) is out and torch.equal(out, want)
    if hasattr(torch, "uint32"):
        narrow = torch.empty(256, dtype=torch.uint32, device="cuda")
        gmjit.histogram(x, out=narrow)
        assert torch.equal(narrow.view(torch.int32).long(), want)


def test_prefix_sum(torch):
    x = rand(torch, 100003)
    close(torch, gmjit.prefix_sum(x), torch.cumsum(x.double(), 0), 1e-5, 1e-4)


def test_bad_tensors_are_rejected_before_anything_launches(torch):
    x = rand(torch, 64, 100)
    with pytest.raises(gmjit.UsageError, match="x is not contiguous"):
        gmjit.softmax(x.T)
    with pytest.raises(gmjit.UsageError, match="x is on cpu"):
        gmjit.softmax(x.cpu())
    with pytest.raises(gmjit.UsageError, match="fp64|no dtype"):
        gmjit.softmax(x.double())
    with pytest.raises(gmjit.UsageError, match="weight has 99 elements"):
        gmjit.rmsnorm(x, rand(torch, 99))
    out = poisoned(torch, (64, 99), torch.float32)
    with pytest.raises(gmjit.UsageError, match="out y has 6336 elements"):
        gmjit.softmax(x, out=out)
    assert torch.isnan(out).all(), "a rejected call wrote its output"
    with pytest.raises(gmjit.UsageError, match="takes 2 input tensors"):
        gmjit.vector_add(x)


def test_runs_on_the_current_torch_stream(torch):
    a, b = rand(torch, 1 << 20), rand(torch, 1 << 20)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        c = gmjit.vector_add(a, b)
    stream.synchronize()
    close(torch, c, a.double() + b.double(), 1e-6, 1e-6)


def test_custom_ops_inside_torch_compile(torch):
    def block(x, w):
        return torch.ops.gmjit.rmsnorm(torch.ops.gmjit.softmax(x) * 2, w) + 1

    x, w = rand(torch, 64, 1000), rand(torch, 1000)
    got = torch.compile(block, fullgraph=True)(x, w)
    s = torch.softmax(x.double(), -1) * 2
    want = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-5) * w.double() + 1
    close(torch, got, want, 1e-5, 1e-5)
    torch.library.opcheck(torch.ops.gmjit.softmax.default, (x,), test_utils=("test_schema", "test_faketensor"))
    a, b = rand(torch, 33, 64, dtype="bfloat16"), rand(torch, 48, 64, dtype="bfloat16")
    torch.library.opcheck(torch.ops.gmjit.gemm.default, (a, b), {"trans_b": 1},
                          test_utils=("test_schema", "test_faketensor"))
