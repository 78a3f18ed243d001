"""FakeComfyUiServer's --exec-python-nodes mode: node classes executed for real in Python.

Module names (comma-separated):
- `h3pipe_nodes`: h3pipe's own node pack (integrations/comfyui/h3pipe_nodes), unchanged, run
  outside ComfyUI with H3PIPE_COMFY_OUTPUT / H3PIPE_COMFY_INPUT on the server's output/ and input/;
- `h3_standins`: the weight-free stand-ins for the core classes of a MiniMax H3 workflow
  (h3_standin_nodes.py, h3_standin_media.py, specs in h3_standin_specs.py), with
  `comfy.nested_tensor` provided as in a ComfyUI that ships H3, so the pack's loader gives back that
  class as it would there.
The classes are called the way ComfyUI's execution.py calls them: the prompt's values by input
name (links resolved to the upstream outputs), the hidden PROMPT / UNIQUE_ID / EXTRA_PNGINFO,
FUNCTION's result a tuple or {"ui", "result"}; IS_CHANGED and VALIDATE_INPUTS as ComfyUI uses them
(a NaN IS_CHANGED never matches the cache); an exception becomes an execution_error with ComfyUI's
exception type name (module path + class, the pack's under <base>/custom_nodes/). /object_info of a
pack class is built from INPUT_TYPES as server.py's node_info does. In this mode a class that has
no Python implementation fails when it runs (its /object_info entry stays).
"""
import math
import os
import sys
import types
import uuid

from fake_comfyui_nodes import ExecutionError, NodeSet

HERE = os.path.dirname(os.path.abspath(__file__))
PACK_PARENT = os.path.join(HERE, "..", "..", "integrations", "comfyui")


def _provide_comfy_nested_tensor(cls):
    """`import comfy.nested_tensor` finds `cls`, as in a ComfyUI with H3 (never over a real one)."""
    if "comfy.nested_tensor" in sys.modules:
        return
    comfy = sys.modules.get("comfy") or types.ModuleType("comfy")
    mod = types.ModuleType("comfy.nested_tensor")
    mod.NestedTensor = cls
    comfy.nested_tensor = mod
    sys.modules.setdefault("comfy", comfy)
    sys.modules["comfy.nested_tensor"] = mod


def _load(name):
    """{class name: (class, /object_info entry or None, python_module)} of one module name."""
    if name == "h3pipe_nodes":
        sys.path.insert(0, os.path.abspath(PACK_PARENT))
        import h3pipe_nodes
        names = getattr(h3pipe_nodes, "NODE_DISPLAY_NAME_MAPPINGS", {})
        return {k: (c, None, "custom_nodes.h3pipe_nodes", names.get(k, k))
                for k, c in h3pipe_nodes.NODE_CLASS_MAPPINGS.items()}
    if name == "h3_standins":
        import h3_standin_media
        import h3_standin_nodes
        import h3_standin_specs
        _provide_comfy_nested_tensor(h3_standin_nodes.NestedTensor)
        classes = {**h3_standin_nodes.NODE_CLASS_MAPPINGS, **h3_standin_media.NODE_CLASS_MAPPINGS}
        return {k: (c, h3_standin_specs.SPECS[k], None, None) for k, c in classes.items()}
    raise SystemExit(f"--exec-python-nodes: unknown module {name!r} (h3pipe_nodes, h3_standins)")


def _listed(v):
    return [_listed(x) for x in v] if isinstance(v, (list, tuple)) else \
        {k: _listed(x) for k, x in v.items()} if isinstance(v, dict) else v


def node_info(name, cls, module, display):
    """server.py node_info() of a classic node class."""
    inputs = _listed(cls.INPUT_TYPES())
    out = list(getattr(cls, "RETURN_TYPES", ()))
    return {"input": inputs, "input_order": {k: list(v) for k, v in inputs.items()},
            "output": out, "output_is_list": list(getattr(cls, "OUTPUT_IS_LIST", [False] * len(out))),
            "output_name": list(getattr(cls, "RETURN_NAMES", out)), "name": name,
            "display_name": display or name, "description": getattr(cls, "DESCRIPTION", ""),
            "python_module": module, "category": getattr(cls, "CATEGORY", "sd"),
            "output_node": bool(getattr(cls, "OUTPUT_NODE", False))}


def _is_link(v):
    return isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) and isinstance(v[1], int)


class PyNodeSet(NodeSet):
    def __init__(self, root, fixtures, packs=(), modules=()):
        super().__init__(root, fixtures, packs)
        os.environ["H3PIPE_COMFY_OUTPUT"] = os.path.join(self.root, "output")
        os.environ["H3PIPE_COMFY_INPUT"] = os.path.join(self.root, "input")
        sys.path.insert(0, HERE)
        self.py = {}  # class -> (class object, spec)
        for m in modules:
            for k, (cls, spec, module, display) in _load(m).items():
                self.py[k] = (cls, spec if spec is not None else node_info(k, cls, module, display))

    def names(self):
        return list(dict.fromkeys(list(self.core) + list(self.custom) + list(self.py)))

    def has(self, cls):
        return cls in self.py or super().has(cls)

    def spec(self, cls):
        if cls not in self.py:
            return super().spec(cls)
        if cls in self.core and self.py[cls][1] is self.core.get(cls):
            return super().spec(cls)
        saved = self.core.get(cls)
        self.core[cls] = self.py[cls][1]  # the folder-filled lists, over this class's own entry
        try:
            return super().spec(cls)
        finally:
            if saved is None:
                del self.core[cls]
            else:
                self.core[cls] = saved

    def _entry(self, cls):
        return self.py[cls][1] if cls in self.py else (self.core.get(cls) or self.custom.get(cls))

    def output_node(self, cls):
        return bool(self._entry(cls)["output_node"])

    def return_types(self, cls):
        return self._entry(cls)["output"]

    def custom_validation(self, cls, inputs):
        obj = self.py.get(cls, (None,))[0]
        fn = getattr(obj, "VALIDATE_INPUTS", None)
        if fn is None:
            return super().custom_validation(cls, inputs)
        names = fn.__code__.co_varnames[1:fn.__code__.co_argcount]
        given = {k: inputs[k] for k in names if k in inputs and not _is_link(inputs[k])}
        ret = fn(**given)
        return {k: (None if ret is True else ret) for k in (given or names[:1])}

    def is_changed(self, cls, inputs):
        obj = self.py.get(cls, (None,))[0]
        if obj is None:
            return super().is_changed(cls, inputs)
        fn = getattr(obj, "IS_CHANGED", None)
        if fn is None:
            return ""
        v = fn(**{k: x for k, x in inputs.items() if not _is_link(x)})
        if isinstance(v, float) and math.isnan(v):
            return str(uuid.uuid4())  # NaN != NaN: never served from the cache
        return str(v)

    def run(self, ctx, node_id, cls, inputs):
        if cls not in self.py:
            raise ExecutionError(node_id, cls, "RuntimeError",
                                 f"{cls} has no Python implementation in this test server "
                                 "(--exec-python-nodes)\n")
        obj, spec = self.py[cls]
        # execution.get_input_data: a constant input the class does not declare is not passed (a
        # link is); the prompt's inputs still count for the cache signature.
        declared = set(spec["input"].get("required", {})) | set(spec["input"].get("optional", {}))
        node = getattr(ctx, "current_prompt", {}).get(node_id, {})
        links = {k for k, v in node.get("inputs", {}).items() if _is_link(v)}
        kwargs = {k: v for k, v in inputs.items() if k in declared or k in links}
        for name, kind in spec["input"].get("hidden", {}).items():
            kind = kind[0] if isinstance(kind, list) else kind
            if kind == "PROMPT":
                kwargs[name] = getattr(ctx, "current_prompt", {})
            elif kind == "UNIQUE_ID":
                kwargs[name] = node_id
            elif kind == "EXTRA_PNGINFO":
                kwargs[name] = getattr(ctx, "current_extra", {}).get("extra_pnginfo")
        try:
            result = getattr(obj(), obj.FUNCTION)(**kwargs)
        except Exception as e:  # noqa: BLE001 - reported as ComfyUI reports a node's exception
            raise ExecutionError(node_id, cls, self.exception_type(e), f"{e}\n",
                                 {k: [repr(v)[:80]] for k, v in inputs.items()}) from e
        if isinstance(result, dict):
            return tuple(result.get("result", ())), result.get("ui")
        return tuple(result), None

    def exception_type(self, e):
        """execution.py's full_type_name; a custom node's module is named by its path."""
        module = type(e).__module__
        name = type(e).__qualname__
        if module in (None, "builtins"):
            return name
        if module.startswith("h3pipe_nodes"):
            module = os.path.join(self.root, "custom_nodes", module)
        return f"{module}.{name}"
