"""Catalog kernels on torch tensors: the problem shape read from the tensors through the
catalog's description, the tensors checked, outputs allocated, the launch on the current torch
stream of the tensors' device."""

import functools
import keyword
import math

import torch

from ._native import UsageError

_DTYPES = {
    torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.uint8: "u8",
    torch.int32: "i32", torch.int64: "i64", torch.float64: "fp64",
}
_TORCH_DTYPES = {name: dtype for dtype, name in _DTYPES.items()}
if hasattr(torch, "uint32"):
    _DTYPES[torch.uint32] = "u32"
    _TORCH_DTYPES["u32"] = torch.uint32

# The layout of an output whose element count does not say it: a transpose swaps the input's
# dimensions; products of keys are laid out in the expression's order otherwise.
_OUTPUT_SHAPES = {
    ("transpose", "out"): lambda shape: (shape["cols"], shape["rows"]),
}


def forget_descriptions():
    """Drops what was remembered of the catalog (a kernel registered again may differ)."""
    _description.cache_clear()
    _problem.cache_clear()


@functools.lru_cache(maxsize=None)
def _description(kernel):
    from . import describe
    return describe(kernel)


def _factors(expression):
    """An element-count expression as (keys, constant) when it is a product of keys and integers,
    else None."""
    if isinstance(expression, str):
        return [expression], 1
    if isinstance(expression, int):
        return [], expression
    if isinstance(expression, list) and expression and expression[0] == "*":
        keys, constant = [], 1
        for term in expression[1:]:
            inner = _factors(term)
            if inner is None:
                return None
            keys += inner[0]
            constant *= inner[1]
        return keys, constant
    return None


def _read_keys(name, dims, expression, shape):
    """Sets the keys `expression` names from a tensor's dimensions `dims`: a key left unknown is the
    element count over the known ones; several unknown keys take the dimensions in order (a
    dimension equal to a constant factor, such as RGB's 3, is set aside; leading dimensions fold
    into the first key, so a (batch, seq, hidden) tensor is rows = batch * seq, cols = hidden)."""
    factors = _factors(expression)
    if factors is None:
        return
    keys, constant = factors
    unknown = [k for k in keys if k not in shape]
    if not unknown:
        return
    known = math.prod(shape[k] for k in keys if k in shape) * constant
    if len(unknown) == 1:
        count = math.prod(dims)
        if known == 0 or count % known:
            raise UsageError(1, f"{name} has {count} elements, not a multiple of {known}")
        shape[unknown[0]] = count // known
        return
    shape_text = tuple(dims)
    dims = list(dims)
    if constant != 1 and constant in dims:
        dims.pop(len(dims) - 1 - dims[::-1].index(constant))
    if len(dims) < len(keys):
        raise UsageError(1, f"{name} has shape {shape_text}: cannot read {', '.join(keys)} from it; "
                            f"pass them as keyword arguments")
    dims = [math.prod(dims[: len(dims) - len(keys) + 1])] + dims[len(dims) - len(keys) + 1:]
    for key, size in zip(keys, dims):
        shape.setdefault(key, int(size))


def _check_tensor(name, tensor, count, dtype, device):
    if not isinstance(tensor, torch.Tensor):
        raise UsageError(1, f"{name} must be a torch.Tensor, not {type(tensor).__name__}")
    if tensor.device.type != "cuda":
        raise UsageError(1, f"{name} is on {tensor.device}; gmjit kernels take CUDA tensors")
    if device is not None and tensor.device != device:
        raise UsageError(1, f"{name} is on {tensor.device}, the other tensors on {device}")
    if _DTYPES.get(tensor.dtype) != dtype:
        raise UsageError(1, f"{name} is {tensor.dtype}; this problem needs {dtype}")
    if not tensor.is_contiguous():
        raise UsageError(1, f"{name} is not contiguous (stride {tensor.stride()}); call .contiguous() first")
    _check_count(name, tensor, count)


def _check_count(name, tensor, count):
    if tensor.numel() != count:
        raise UsageError(1, f"{name} has {tensor.numel()} elements (shape {tuple(tensor.shape)}); "
                            f"this problem needs {count}")


def problem_of(kernel, inputs, dtype=None, keys=None):
    """The (dtype, shape, description) a launch of `kernel` on `inputs` runs as: keys from the
    tensors (and from `keys`), validated by the library, with each tensor's count. Remembered per
    kernel, dtype, input shapes and dtypes, and keys, so a repeated launch asks the library once."""
    entry = _description(kernel)
    specs = [t for t in entry["tensors"] if t["role"] == "input"]
    if len(inputs) != len(specs):
        names = ", ".join(t["name"] for t in specs)
        raise UsageError(1, f"{kernel} takes {len(specs)} input tensors ({names}), got {len(inputs)}")
    signature = tuple((tuple(int(d) for d in t.shape), t.dtype) if isinstance(t, torch.Tensor) else None
                      for t in inputs)
    return _problem(kernel, signature, dtype, tuple(sorted((keys or {}).items())))


@functools.lru_cache(maxsize=4096)
def _problem(kernel, signature, dtype, keys):
    from . import describe, prepare_launch
    specs = [t for t in _description(kernel)["tensors"] if t["role"] == "input"]
    if dtype is None and signature[0] is not None:
        # A first input of fixed dtype (histogram's u8) leaves the kernel's default dtype.
        dtype = _DTYPES.get(signature[0][1]) if specs[0]["dtype"] is None else None
    shape = dict(keys)
    for spec, tensor in zip(specs, signature):
        if tensor is not None:
            _read_keys(spec["name"], tensor[0], spec["elements"], shape)
    problem = describe(kernel, shape, dtype)
    dtype, shape = problem["problem"]["dtype"], problem["problem"]["shape"]
    problem["prepared"] = prepare_launch(kernel, shape, dtype)
    return dtype, shape, problem


def _output_shape(kernel, spec, shape, inputs, input_specs):
    if (kernel, spec["name"]) in _OUTPUT_SHAPES:
        return _OUTPUT_SHAPES[(kernel, spec["name"])](shape)
    for input_spec, tensor in zip(input_specs, inputs):
        if input_spec["count"] == spec["count"] and input_spec["elements"] == spec["elements"]:
            return tuple(tensor.shape)
    factors = _factors(spec["elements"])
    if factors and factors[1] == 1 and len(factors[0]) > 1:
        return tuple(shape[k] for k in factors[0])
    return (spec["count"],)


def _dtype_flags(kernel, out, keys):
    """The flag keys that choose an output's dtype (histogram's i64_counts), where `keys` leaves
    them out: set to match `out`'s dtype when it is given, else to torch's int64 for counts."""
    flags = {}
    specs = [t for t in _description(kernel)["tensors"] if t["role"] == "output"]
    given = None if out is None else (list(out) if isinstance(out, (tuple, list)) else [out])
    for i, spec in enumerate(specs):
        flag = spec.get("dtype_flag")
        if not flag or flag["key"] in keys:
            continue
        if given is not None and i < len(given) and isinstance(given[i], torch.Tensor):
            flags[flag["key"]] = int(_DTYPES.get(given[i].dtype) == flag["dtype"])
        else:
            flags[flag["key"]] = int(flag["dtype"] == "i64")
    return flags


def launch(kernel, *inputs, out=None, dtype=None, **keys):
    """gmjit.launch on torch, imported."""
    from . import runtime
    keys.update(_dtype_flags(kernel, out, keys))
    dtype, shape, problem = problem_of(kernel, inputs, dtype, keys)
    tensors = problem["tensors"]
    input_specs = [t for t in tensors if t["role"] == "input"]
    output_specs = [t for t in tensors if t["role"] == "output"]
    device = inputs[0].device if inputs and isinstance(inputs[0], torch.Tensor) else None
    for spec, tensor in zip(input_specs, inputs):
        _check_tensor(spec["name"], tensor, spec["count"], spec["resolved_dtype"], device)
    if out is None:
        outputs = []
        for spec in output_specs:
            torch_dtype = _TORCH_DTYPES.get(spec["resolved_dtype"])
            if torch_dtype is None:
                raise UsageError(1, f"{spec['name']} is {spec['resolved_dtype']}, which this torch has no dtype for")
            outputs.append(torch.empty(_output_shape(kernel, spec, shape, inputs, input_specs), dtype=torch_dtype,
                                       device=device))
    else:
        outputs = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(outputs) != len(output_specs):
            raise UsageError(1, f"{kernel} has {len(output_specs)} outputs, out has {len(outputs)}")
        for spec, tensor in zip(output_specs, outputs):
            _check_tensor(f"out {spec['name']}", tensor, spec["count"], spec["resolved_dtype"], device)
    stream = torch.cuda.current_stream(device).cuda_stream
    runtime(device.index).launch_prepared(problem["prepared"], [t.data_ptr() for t in (*inputs, *outputs)], stream)
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


# ---------------------------------------------------------------------------------------------
# torch.ops.gmjit.<kernel>: each catalog kernel as a torch custom op, with a fake (meta)
# implementation that computes the outputs' shapes and dtypes, so torch.compile(fullgraph=True)
# can trace through it.

_library = None
_registered = set()


def _argument_name(name):
    return name + "_" if keyword.iskeyword(name) or name in ("self", "out") else name


def _schema_keys(entry):
    """The keys no input tensor's element count mentions (gemm's trans_b, histogram's contention):
    the op takes them as keyword arguments, a data key with its default."""
    mentioned = set()
    for spec in entry["tensors"]:
        factors = _factors(spec["elements"]) if spec["role"] == "input" else None
        if factors:
            mentioned.update(factors[0])
    required = [k for k in entry["problem_keys"] if k not in mentioned]
    # A flag choosing an output's dtype defaults to what gmjit.launch picks without `out`.
    chosen = {t["dtype_flag"]["key"]: int(t["dtype_flag"]["dtype"] == "i64")
              for t in entry["tensors"] if t["role"] == "output" and t.get("dtype_flag")}
    optional = [(d["name"], chosen.get(d["name"], d["default"])) for d in entry["data_keys"]]
    return required, optional


def _outputs_for(kernel, inputs, keys, make):
    # torch may leave out a keyword at its schema default: pick the dtype flags as launch() does.
    keys = {**_dtype_flags(kernel, None, keys), **keys}
    dtype, shape, problem = problem_of(kernel, inputs, None, keys)
    specs = problem["tensors"]
    input_specs = [t for t in specs if t["role"] == "input"]
    for spec, tensor in zip(input_specs, inputs):
        _check_count(spec["name"], tensor, spec["count"])
    outputs = [make(_output_shape(kernel, spec, shape, inputs, input_specs), _TORCH_DTYPES[spec["resolved_dtype"]])
               for spec in specs if spec["role"] == "output"]
    return outputs


def register_ops(kernels=None):
    """Registers torch.ops.gmjit.<kernel> for the catalog's kernels (all when `kernels` is None);
    a kernel registered before is left as it is. Returns the names registered now."""
    global _library
    from . import list_kernels
    if _library is None:
        _library = torch.library.Library("gmjit", "DEF")
    done = []
    for entry in list_kernels():
        name = entry["name"]
        if name in _registered or (kernels is not None and name not in kernels):
            continue
        inputs = [t for t in entry["tensors"] if t["role"] == "input"]
        outputs = [t for t in entry["tensors"] if t["role"] == "output"]
        required, optional = _schema_keys(entry)
        arguments = [f"Tensor {_argument_name(t['name'])}" for t in inputs]
        keyword_arguments = [f"int {k}" for k in required] + [f"int {k}={v}" for k, v in optional]
        if keyword_arguments:
            arguments += ["*"] + keyword_arguments
        returns = "Tensor" if len(outputs) == 1 else "(" + ", ".join("Tensor" for _ in outputs) + ")"
        _library.define(f"{name}({', '.join(arguments)}) -> {returns}")

        def cuda_impl(*tensors, _kernel=name, **keys):
            return launch(_kernel, *tensors, **{k: int(v) for k, v in keys.items()})

        def fake_impl(*tensors, _kernel=name, _single=len(outputs) == 1, **keys):
            device = tensors[0].device
            made = _outputs_for(_kernel, tensors, {k: int(v) for k, v in keys.items()},
                                lambda shape, dtype: torch.empty(shape, dtype=dtype, device=device))
            return made[0] if _single else tuple(made)

        cuda_impl.__name__ = fake_impl.__name__ = name
        _library.impl(name, cuda_impl, "CUDA")
        torch.library.register_fake(f"gmjit::{name}", fake_impl, lib=_library)
        _registered.add(name)
        done.append(name)
    return done


try:
    register_ops()
except ImportError:  # no libgmjit: the launch that needs it says where it looked
    pass
