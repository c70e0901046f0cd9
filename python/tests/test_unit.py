"""The module without torch and without a GPU: import, the catalog, argument errors, compile."""

import json
import os
import pathlib
import subprocess
import sys
import threading

import pytest

import gmjit


def test_import_needs_neither_torch_nor_a_gpu():
    code = "import sys, gmjit; gmjit.list_kernels(); print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, check=True)
    assert done.stdout.strip() == "False"


def test_versions():
    assert gmjit.api_version() >= 1
    assert gmjit.version().count(".") == 2


def test_list_kernels_is_the_catalog():
    names = [k["name"] for k in gmjit.list_kernels()]
    for name in ("vector_add", "sgemm", "gemm", "softmax", "rmsnorm", "layernorm", "histogram", "prefix_sum"):
        assert name in names
    softmax = next(k for k in gmjit.list_kernels() if k["name"] == "softmax")
    assert [t["name"] for t in softmax["tensors"]] == ["x", "y"]
    assert softmax["problem_keys"] == ["rows", "cols"]


def test_describe_gives_counts_and_dtypes_at_a_shape():
    d = gmjit.describe("rmsnorm", {"rows": 7, "cols": 33}, "bf16")
    assert d["problem"] == {"dtype": "bf16", "shape": {"rows": 7, "cols": 33}}
    assert [(t["name"], t["role"], t["count"], t["resolved_dtype"]) for t in d["tensors"]] == [
        ("x", "input", 231, "bf16"), ("weight", "input", 33, "bf16"), ("y", "output", 231, "bf16")]
    histogram = gmjit.describe("histogram", {"n": 5})
    assert histogram["tensors"][1]["resolved_dtype"] == "u32"
    assert histogram["tensors"][1]["count"] == 256
    assert histogram["tensors"][1]["dtype_flag"] == {"key": "i64_counts", "dtype": "i64"}
    wide = gmjit.describe("histogram", {"n": 5, "i64_counts": 1})
    assert wide["tensors"][1]["resolved_dtype"] == "i64" and wide["problem"]["shape"]["i64_counts"] == 1


def test_expressions_register_as_catalog_kernels():
    f = gmjit.expression("w: bf16[cols]; y = x * rsqrt(mean(x * x) + 1e-6) * w", dtype="bf16", name="py_unit_rmsnorm")
    assert f.kernel == "py_unit_rmsnorm" and f.__name__ == "py_unit_rmsnorm"
    d = gmjit.describe(f.kernel, {"rows": 7, "cols": 33})
    assert d["problem"] == {"dtype": "bf16", "shape": {"rows": 7, "cols": 33}}
    assert [(t["name"], t["role"], t["count"], t["resolved_dtype"]) for t in d["tensors"]] == [
        ("w", "input", 33, "bf16"), ("x", "input", 231, "bf16"), ("y", "output", 231, "bf16")]
    assert gmjit.expression("y = silu(a) * b").kernel.startswith("expr_")
    with pytest.raises(gmjit.UsageError, match="column 5: unknown function 'foo'"):
        gmjit.expression("y = foo(a)")
    with pytest.raises(gmjit.UsageError, match="fp32"):
        gmjit.expression("y = a", dtype="int8")


def test_bad_arguments_raise_usage_errors_naming_the_problem():
    with pytest.raises(gmjit.UsageError, match="no_such_kernel"):
        gmjit.describe("no_such_kernel")
    with pytest.raises(gmjit.UsageError, match="rows"):
        gmjit.describe("vector_add", {"rows": 3})
    with pytest.raises(ValueError, match="integers"):
        gmjit.describe("vector_add", {"n": 2.5})
    with pytest.raises(gmjit.UsageError, match="miss_policy"):
        gmjit.Runtime(miss_policy="sometimes")
    with pytest.raises(gmjit.UsageError) as caught:
        gmjit.describe("vector_add", {"n": -1})
    assert caught.value.kind == "usage"


def test_a_launch_with_the_wrong_tensors_fails_before_the_device(tmp_path):
    with gmjit.Runtime(cache=str(tmp_path / "gmjit.db"), miss_policy="default_config") as runtime:
        with pytest.raises(gmjit.UsageError, match="3 tensors"):
            runtime.launch("vector_add", {"n": 16}, [0x1000, 0x2000])
    with pytest.raises(gmjit.UsageError, match="closed"):
        runtime.launch("vector_add", {"n": 16}, [1, 2, 3])


def test_errors_are_per_thread():
    failures = []

    def fail():
        try:
            gmjit.describe("vector_add", {"m": 1})
        except gmjit.UsageError as e:
            failures.append(str(e))

    threads = [threading.Thread(target=fail) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(failures) == 4 and all("m" in f for f in failures)


def test_kernel_functions_are_reached_by_name():
    softmax = gmjit.softmax
    assert softmax.__name__ == "softmax" and "softmax" in softmax.__doc__
    with pytest.raises(AttributeError, match="no kernel"):
        gmjit.no_such_kernel  # noqa: B018
    try:
        import torch  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="need torch"):
            softmax(None)


def test_python_m_gmjit_runs_gmtune():
    done = subprocess.run([sys.executable, "-m", "gmjit", "list", "--json"], capture_output=True, text=True,
                          env=os.environ)
    assert done.returncode == 0, done.stderr
    # The kernels this process registered (expressions, user kernels) are its own.
    built_in = [k["name"] for k in gmjit.list_kernels() if not k["user"]]
    assert [k["name"] for k in json.loads(done.stdout)["kernels"]] == built_in


@pytest.mark.skipif(os.environ.get("GMJIT_TEST_NVRTC") != "1", reason="compiles with NVRTC: the nvrtc tier")
def test_compile_writes_what_gmtune_compile_writes(tmp_path):
    report = gmjit.compile("softmax", {"rows": 4, "cols": 100}, {}, "bf16", "sm_90a", tmp_path)
    assert report["arch"] == "sm_90a" and report["dtype"] == "bf16"
    suffixes = {p.suffix for p in pathlib.Path(tmp_path).iterdir()}
    assert {".cu", ".ptx", ".cubin", ".log", ".json"} <= suffixes
    with pytest.raises(gmjit.UsageError, match="99999"):
        gmjit.compile("vector_add", {"n": 8}, {"block": 99999}, arch="sm_90a")


@pytest.mark.skipif(os.environ.get("GMJIT_TEST_NVRTC") != "1", reason="compiles with NVRTC: the nvrtc tier")
def test_without_a_toolkit_nvrtc_and_headers_come_from_the_nvidia_wheels(tmp_path):
    """The layout pip gives nvidia-cuda-nvrtc and nvidia-cuda-runtime (site-packages/nvidia/cu13/
    {lib,include}), made from the toolkit's own files, while a private mount hides the toolkit's
    headers: the module must find and use the wheel's."""
    toolkit = pathlib.Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda")
    nvrtc = next((p for p in (toolkit / "lib64" / "libnvrtc.so.13", toolkit / "lib" / "libnvrtc.so.13") if p.exists()),
                 None)
    if nvrtc is None or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs the toolkit's libnvrtc.so.13 and a private mount namespace (unshare -m)")
    wheel = tmp_path / "site" / "nvidia" / "cu13"
    (wheel / "lib").mkdir(parents=True)
    (wheel / "include").mkdir()
    (wheel / "lib" / "libnvrtc.so.13").symlink_to(nvrtc)
    jitlink = nvrtc.parent / "libnvJitLink.so.13"
    if jitlink.exists():
        (wheel / "lib" / "libnvJitLink.so.13").symlink_to(jitlink)
    (tmp_path / "empty").mkdir()
    probe = ("import gmjit, gmjit._native as n; r = gmjit.compile('softmax', {'rows': 4, 'cols': 100}, {}, 'bf16', "
             "'sm_90a'); print(n.cuda_source()); print([o for o in r['options'] if o.startswith('-I')]); "
             "print(r['cubin_bytes'] > 0)")
    script = (f"mount --bind {toolkit / 'include'} {wheel / 'include'} && "
              f"mount --bind {tmp_path / 'empty'} {toolkit / 'include'} && exec {sys.executable} -c \"{probe}\"")
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), env.get("PYTHONPATH", "")])
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == [str(wheel), str([f"-I{wheel / 'include'}"]), "True"]
