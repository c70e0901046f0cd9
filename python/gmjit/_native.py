"""libgmjit's C API (gmjit/gmjit.h) through ctypes: finding the library, the function signatures,
and statuses turned into exceptions. Nothing here needs torch or a GPU."""

import ctypes
import ctypes.util
import json
import os
import pathlib
import sys
import threading

API_VERSION = 2  # GMJIT_API_VERSION this module was written against

_STATUS_NAMES = {
    1: "usage", 2: "driver", 3: "nvrtc", 4: "compile", 5: "device_limit", 6: "launch",
    7: "cache", 8: "cache_miss", 9: "out_of_memory", 10: "internal",
}
MISS_POLICIES = {"nearest": 0, "tune": 1, "default_config": 2, "fail": 3}


class GmjitError(RuntimeError):
    """A failed libgmjit call; `kind` names the layer ("driver", "compile", "cache_miss", ...)."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.kind = _STATUS_NAMES.get(status, "internal")


class UsageError(GmjitError, ValueError):
    """Bad input from the caller: an unknown kernel, key or dtype, a tensor of the wrong size."""


def _candidates():
    explicit = os.environ.get("GMJIT_LIBRARY")
    if explicit:
        return [pathlib.Path(explicit)]
    here = pathlib.Path(__file__).resolve().parent / "_native"
    found = [here / "libgmjit.so.0"]
    system = ctypes.util.find_library("gmjit")
    if system:
        found.append(pathlib.Path(system))
    return found


def _wheel_cuda_dirs():
    """nvidia/cu13 directories of installed nvidia wheels (nvidia-cuda-nvrtc, nvidia-cuda-runtime),
    as pip installs them beside torch."""
    found = []
    for entry in sys.path:
        candidate = pathlib.Path(entry or ".") / "nvidia" / "cu13"
        if candidate.is_dir() and candidate not in found:
            found.append(candidate)
    return found


def _wheel_libraries(name):
    """`name` in the lib/ of each installed nvidia wheel directory, where it exists."""
    return [cuda / "lib" / name for cuda in _wheel_cuda_dirs() if (cuda / "lib" / name).exists()]


def _use_cuda_wheels():
    """Where no CUDA toolkit is installed, NVRTC and the headers it compiles against come from the
    nvidia wheels: their libnvrtc (and libnvJitLink, from nvidia-nvjitlink, which the LLVM code
    generator's PTX -> cubin step uses) are loaded first, so libgmjit's libnvrtc.so.13 and
    libnvJitLink.so.13 resolve to them, and CUDA_HOME names their include/ (cuda_fp16.h,
    cuda_bf16.h). CUDA_HOME set by the user, or a toolkit at /usr/local/cuda, is left to be used as
    it is. Returns where NVRTC came from."""
    for toolkit in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if toolkit and (pathlib.Path(toolkit) / "include" / "cuda_fp16.h").exists():
            return toolkit
    for cuda in _wheel_cuda_dirs():
        nvrtc = cuda / "lib" / "libnvrtc.so.13"
        if nvrtc.exists() and (cuda / "include" / "cuda_fp16.h").exists():
            ctypes.CDLL(str(nvrtc), mode=ctypes.RTLD_GLOBAL)
            for jitlink in _wheel_libraries("libnvJitLink.so.13"):
                ctypes.CDLL(str(jitlink), mode=ctypes.RTLD_GLOBAL)
                break
            os.environ["CUDA_HOME"] = str(cuda)
            return str(cuda)
    return None


_lock = threading.Lock()
_cuda_source = None
_lib = None


def cuda_source():
    """The directory NVRTC and the CUDA headers come from: a toolkit, or the nvidia wheels'
    nvidia/cu13; None when neither was found (compiles then fail, saying so)."""
    library()
    return _cuda_source


def native_dir():
    """The directory of the libgmjit that is loaded (gmtune and gmjit-worker sit beside it in a
    pip install)."""
    lib = library()
    return pathlib.Path(lib._name).resolve().parent


def library():
    """The loaded libgmjit, loaded on first use (so `import gmjit` works without it)."""
    global _lib
    if _lib is not None:  # every call passes here: no lock once loaded
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        global _cuda_source
        _cuda_source = _use_cuda_wheels()
        paths = _candidates()
        tried = []
        lib = None
        for path in paths:
            if not path.exists() and path.is_absolute():
                tried.append(f"{path} (absent)")
                continue
            try:
                lib = ctypes.CDLL(str(path))
                break
            except OSError as e:
                tried.append(f"{path} ({e})")
        if lib is None:
            raise ImportError("libgmjit not found: tried " + "; ".join(tried) +
                              ". Install with `pip install ./python` from a libgmjit checkout, or set "
                              "GMJIT_LIBRARY to the path of libgmjit.so.0")
        _declare(lib)
        if lib.gmjit_api_version() < API_VERSION:
            raise ImportError(f"{lib._name} has C API version {lib.gmjit_api_version()}, "
                              f"this module needs {API_VERSION} or later")
        _lib = lib
        return lib


def _declare(lib):
    c_char_pp = ctypes.POINTER(ctypes.c_char_p)
    i64p = ctypes.POINTER(ctypes.c_int64)
    out_text = ctypes.POINTER(ctypes.c_void_p)  # freed with gmjit_free, so not a c_char_p
    shape = [c_char_pp, i64p, ctypes.c_size_t]
    signatures = {
        "gmjit_api_version": (ctypes.c_int, []),
        "gmjit_version": (ctypes.c_char_p, []),
        "gmjit_last_error": (ctypes.c_char_p, []),
        "gmjit_free": (None, [ctypes.c_void_p]),
        "gmjit_runtime_open": (ctypes.c_int, [ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                                              ctypes.POINTER(ctypes.c_void_p)]),
        "gmjit_runtime_close": (ctypes.c_int, [ctypes.c_void_p]),
        "gmjit_launch": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, *shape,
                                        ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, ctypes.c_void_p]),
        "gmjit_resolve": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, *shape, out_text]),
        "gmjit_tune": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, *shape, ctypes.c_char_p,
                                      ctypes.c_size_t, ctypes.c_double, out_text]),
        "gmjit_list_kernels": (ctypes.c_int, [out_text]),
        "gmjit_describe": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, *shape, out_text]),
        "gmjit_register_kernel": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, out_text]),
        "gmjit_register_kernel_file": (ctypes.c_int, [ctypes.c_char_p, out_text]),
        "gmjit_register_expression": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, out_text]),
        "gmjit_compile": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, *shape, c_char_pp, i64p,
                                         ctypes.c_size_t, ctypes.c_char_p, ctypes.c_char_p, out_text]),
    }
    for name, (result, arguments) in signatures.items():
        function = getattr(lib, name)
        function.restype = result
        function.argtypes = arguments


def check(status):
    """Raises the exception of a failed status, with this thread's reason."""
    if status == 0:
        return
    message = (library().gmjit_last_error() or b"").decode(errors="replace")
    raise (UsageError if status == 1 else GmjitError)(status, message)


def text(value):
    """bytes for a C string argument; None stays NULL."""
    return None if value is None else str(value).encode()


def assignments(values):
    """A {key: int} mapping as the C API's parallel arrays (keys, values, count)."""
    values = dict(values or {})
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(1, f"{key}={value!r}: sizes and parameters are integers")
    keys = (ctypes.c_char_p * max(1, len(values)))(*[k.encode() for k in values])
    numbers = (ctypes.c_int64 * max(1, len(values)))(*values.values())
    return keys, numbers, len(values)


def call_for_text(function, *arguments):
    """Calls a C API function whose last argument is a `char**` result, and returns the text."""
    out = ctypes.c_void_p()
    check(function(*arguments, ctypes.byref(out)))
    try:
        return ctypes.string_at(out.value).decode() if out.value else None
    finally:
        library().gmjit_free(out)


def call_for_json(function, *arguments):
    return json.loads(call_for_text(function, *arguments))
