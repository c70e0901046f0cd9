"""gmjit: libgmjit's tuned CUDA kernels from Python.

Without torch and without a GPU: the catalog (`list_kernels`, `describe`), `compile` (for an arch
such as "sm_90a"), `register_kernel`, and `Runtime` on raw device pointers. With torch:
`gmjit.launch("softmax", x)` and one function per catalog kernel (`gmjit.softmax(x)`,
`gmjit.rmsnorm(x, w)`, ...), which read the problem shape from the tensors, check them, allocate
the outputs and launch on the current torch stream of the tensors' device.
"""

import json as _json
import sys as _sys

from . import _native
from ._native import GmjitError, UsageError, MISS_POLICIES

__all__ = [
    "GmjitError", "UsageError", "Runtime", "api_version", "version", "list_kernels", "describe",
    "compile", "register_kernel", "register_kernel_file", "expression", "tune", "launch", "runtime", "configure",
    "register_torch_ops",
]


def api_version():
    """GMJIT_API_VERSION of the loaded libgmjit."""
    return _native.library().gmjit_api_version()


def version():
    """libgmjit's version, "major.minor.patch"."""
    return _native.library().gmjit_version().decode()


def list_kernels():
    """Every kernel of the catalog (built-in and registered) as dicts, as `gmtune list --json`."""
    lib = _native.library()
    return _native.call_for_json(lib.gmjit_list_kernels)["kernels"]


def describe(kernel, shape=None, dtype=None):
    """One kernel's description. With a shape ({key: size}), also "problem" (the normalized dtype
    and shape) and each tensor's "count" and "resolved_dtype" there."""
    lib = _native.library()
    return _native.call_for_json(lib.gmjit_describe, _native.text(kernel), _native.text(dtype),
                                 *_native.assignments(shape))


def compile(kernel, shape, config=None, dtype=None, arch=None, out_dir=None):  # noqa: A001 (mirrors gmjit::compile)
    """Compiles one configuration (defaults for parameters not given) for `arch` (None: device
    0's). With out_dir, writes .cu .ptx .cubin .log resources.json (and .sass where nvdisasm is
    installed) there, as `gmtune compile --out`. Returns the resource report and identity."""
    lib = _native.library()
    return _native.call_for_json(lib.gmjit_compile, _native.text(kernel), _native.text(dtype),
                                 *_native.assignments(shape), *_native.assignments(config), _native.text(arch),
                                 _native.text(out_dir and str(out_dir)))


def register_kernel(manifest, source):
    """Registers a kernel of your own: its manifest (a dict or JSON text) and .cuh source. Returns
    its name."""
    lib = _native.library()
    manifest_text = manifest if isinstance(manifest, str) else _json.dumps(manifest)
    name = _native.call_for_text(lib.gmjit_register_kernel, manifest_text.encode(), source.encode())
    _forget_descriptions()
    return name


def register_kernel_file(path):
    """Registers the kernel a manifest file describes (its header_file read relative to it)."""
    lib = _native.library()
    name = _native.call_for_text(lib.gmjit_register_kernel_file, str(path).encode())
    _forget_descriptions()
    return name


def expression(text, dtype="fp32", name=None):
    """Registers a kernel generated from an expression (README.md, "Expressions"), e.g.
    gmjit.expression("y = silu(a) * b", dtype="bf16"), and returns a function that launches it on
    torch tensors like gmjit.launch: inputs in the text's order (declared ones first), rows and
    cols read from them (leading dimensions fold into rows), outputs allocated like the first input
    of their size unless `out` is given. `dtype` is that of the inputs the text does not declare.
    The kernel is named `name` (default: expr_ and a hash of the text) and is resolved, tuned and
    cached like any catalog kernel: gmjit.tune(f.kernel, {"rows": ..., "cols": ...}) tunes it."""
    lib = _native.library()
    kernel = _native.call_for_text(lib.gmjit_register_expression, _native.text(name or ""), text.encode(),
                                   _native.text(dtype))
    _forget_descriptions()
    function = _kernel_function(kernel, f"generated from the expression {text!r}")
    function.kernel = kernel
    return function


def _forget_descriptions():
    # The tensor layer remembers descriptions; a kernel registered again replaces its own.
    if "gmjit._torch" in _sys.modules:
        _sys.modules["gmjit._torch"].forget_descriptions()


def prepare_launch(kernel, shape, dtype=None):
    """The C arguments that name one problem (kernel, dtype, shape), for Runtime.launch_prepared."""
    return (_native.text(kernel), _native.text(dtype), *_native.assignments(shape))


class Runtime:
    """A gmjit::Runtime on one device: launches tuned kernels on raw device pointers. Opening one
    touches neither the device nor the cache; that happens at the first launch or resolve."""

    def __init__(self, device=0, cache=None, miss_policy="nearest"):
        if miss_policy not in MISS_POLICIES:
            raise UsageError(1, f"miss_policy {miss_policy!r} is not one of {', '.join(MISS_POLICIES)}")
        lib = _native.library()
        handle = _native.ctypes.c_void_p()
        _native.check(lib.gmjit_runtime_open(int(device), _native.text(cache), MISS_POLICIES[miss_policy],
                                             _native.ctypes.byref(handle)))
        self._handle = handle
        self.device = int(device)

    def _live(self):
        if not self._handle:
            raise UsageError(1, "this Runtime is closed")
        return self._handle

    def launch(self, kernel, shape, pointers, stream=0, dtype=None):
        """Launches `kernel` for `shape` on device addresses (ints: inputs, then outputs) on
        `stream` (a CUstream as int; 0: the default stream). Does not synchronize."""
        self.launch_prepared(prepare_launch(kernel, shape, dtype), pointers, stream)

    def launch_prepared(self, prepared, pointers, stream=0):
        """launch() with the kernel, dtype and shape converted once by prepare_launch(), for a
        caller that launches one problem many times (the tensor layer does)."""
        addresses = (_native.ctypes.c_uint64 * max(1, len(pointers)))(*pointers)
        _native.check(_native.library().gmjit_launch(self._live(), *prepared, addresses, len(pointers),
                                                     stream or None))

    def resolve(self, kernel, shape, dtype=None):
        """The configuration a launch would use, and where it came from ("cache", "nearest", ...)."""
        lib = _native.library()
        return _native.call_for_json(lib.gmjit_resolve, self._live(), _native.text(kernel), _native.text(dtype),
                                     *_native.assignments(shape))

    def tune(self, kernel, shape, dtype=None, strategy=None, max_evaluations=0, max_seconds=0.0):
        """Tunes one problem on this device into this Runtime's cache; the report as
        `gmtune tune --json` prints it."""
        lib = _native.library()
        return _native.call_for_json(lib.gmjit_tune, self._live(), _native.text(kernel), _native.text(dtype),
                                     *_native.assignments(shape), _native.text(strategy), int(max_evaluations),
                                     float(max_seconds))

    def close(self):
        """Releases the modules, workspaces and context; call once its launches have completed."""
        if self._handle:
            handle, self._handle = self._handle, None
            _native.check(_native.library().gmjit_runtime_close(handle))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (interpreter shutdown: the library may be gone)
            pass


_runtimes = {}
_runtime_settings = {"cache": None, "miss_policy": "nearest"}


def configure(cache=None, miss_policy="nearest"):
    """The cache file and miss policy of the runtimes `launch` opens (one per device); takes
    effect for devices not launched on yet."""
    if miss_policy not in MISS_POLICIES:
        raise UsageError(1, f"miss_policy {miss_policy!r} is not one of {', '.join(MISS_POLICIES)}")
    _runtime_settings.update(cache=cache, miss_policy=miss_policy)


def runtime(device=0):
    """The Runtime `launch` uses for a device, opened on first use with `configure`'s settings."""
    device = int(device)
    if device not in _runtimes:
        _runtimes[device] = Runtime(device, **_runtime_settings)
    return _runtimes[device]


def tune(kernel, shape, dtype=None, device=0, strategy=None, max_evaluations=0, max_seconds=0.0):
    """Tunes one problem on `device` into the cache `launch` reads, as `gmtune tune` does."""
    return runtime(device).tune(kernel, shape, dtype, strategy, max_evaluations, max_seconds)


def _torch_module():
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise ImportError(f"gmjit's tensor functions need torch ({e}); the rest of gmjit does not") from e
    from . import _torch
    return _torch


def launch(kernel, *inputs, out=None, dtype=None, **keys):
    """Launches a catalog kernel on torch tensors and returns its output(s).

    The inputs come in the kernel's tensor order (gmjit.describe(kernel)["tensors"]); the problem
    keys are read from their shapes, and keyword arguments give keys the tensors cannot (gemm's
    trans_b, histogram's contention). `out` (a tensor, or a tuple for several outputs) is written
    when given, else allocated. A wrong dtype, device, contiguity or size raises UsageError (a
    ValueError) naming the tensor, before anything launches. Runs on the current torch stream of
    the inputs' device, with that device's gmjit.runtime()."""
    return _torch_module().launch(kernel, *inputs, out=out, dtype=dtype, **keys)


def register_torch_ops(kernels=None):
    """Registers torch.ops.gmjit.<kernel> (custom ops with fake implementations, usable inside
    torch.compile(fullgraph=True)) for the catalog's kernels, or for the names in `kernels`. Done
    for the catalog when gmjit is imported after torch, or on the first tensor launch; call it
    for kernels registered later. Returns the names registered now."""
    return _torch_module().register_ops(kernels)


def _kernel_function(kernel, summary):
    def call(*inputs, out=None, dtype=None, **keys):
        return launch(kernel, *inputs, out=out, dtype=dtype, **keys)
    call.__name__ = call.__qualname__ = kernel
    call.__doc__ = f"{summary}\n\n{launch.__doc__}"
    return call


def __getattr__(name):
    # gmjit.softmax, gmjit.rmsnorm, ...: one function per catalog kernel, looked up when used so
    # kernels registered later are reached too.
    if name.startswith("_"):
        raise AttributeError(name)
    try:
        kernels = {k["name"]: k for k in list_kernels()}
    except ImportError:
        kernels = {}
    if name not in kernels:
        raise AttributeError(f"module 'gmjit' has no attribute {name!r} (and no kernel of that name)")
    # Kept, so the next gmjit.<name> is a plain attribute and does not read the catalog again.
    function = globals()[name] = _kernel_function(name, kernels[name]["summary"])
    return function


if "torch" in _sys.modules:
    try:
        register_torch_ops()
    except ImportError:  # no libgmjit yet: the first call says where it looked
        pass
