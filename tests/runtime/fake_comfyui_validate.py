"""POST /prompt validation as ComfyUI 0.3.64's execution.validate_prompt / validate_inputs does it,
over FakeComfyUiServer's NodeSet: the same error types, messages, details and node_errors shape.
Only nodes the output nodes need are validated. Standard library only."""


def _error(type_, message, details="", extra=None):
    return {"type": type_, "message": message, "details": details, "extra_info": extra or {}}


def _is_link(v):
    return isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) and isinstance(v[1], int)


def _types_match(received, expected):
    if not isinstance(expected, str) or not isinstance(received, str):
        return True
    if "*" in (received, expected) or received == expected:
        return True
    return bool(set(received.split(",")) & set(expected.split(",")))


def _convert(input_type, val):
    if input_type == "INT":
        return int(val)
    if input_type == "FLOAT":
        return float(val)
    if input_type == "STRING":
        return str(val)
    if input_type == "BOOLEAN":
        return bool(val)
    return val


def validate_inputs(nodes, prompt, unique_id, validated):
    if unique_id in validated:
        return validated[unique_id]
    node = prompt[unique_id]
    inputs, cls = node["inputs"], node["class_type"]
    spec = nodes.spec(cls)["input"]
    custom = nodes.custom_validation(cls, inputs)
    errors, valid = [], True
    for category in ("required", "optional"):
        for x, input_info in spec.get(category, {}).items():
            input_type = input_info[0]
            extra_info = input_info[1] if len(input_info) > 1 else {}
            info = [input_type, extra_info]
            if x not in inputs:
                if category == "required":
                    errors.append(_error("required_input_missing", "Required input is missing", x,
                                         {"input_name": x}))
                continue
            val = inputs[x]
            if isinstance(val, list):
                if len(val) != 2:
                    errors.append(_error("bad_linked_input",
                                         "Bad linked input, must be a length-2 list of [node_id, slot_index]", x,
                                         {"input_name": x, "input_config": info, "received_value": val}))
                    continue
                o_id = val[0]
                try:
                    received = nodes.return_types(prompt[o_id]["class_type"])[val[1]]
                except (KeyError, IndexError, TypeError) as ex:
                    validated[o_id if isinstance(o_id, str) else str(o_id)] = (False, [_error(
                        "exception_during_inner_validation", "Exception when validating inner node", str(ex),
                        {"input_name": x, "input_config": info, "exception_message": str(ex),
                         "exception_type": type(ex).__name__, "traceback": [], "linked_node": val})], o_id)
                    valid = False
                    continue
                if not _types_match(received, input_type):
                    errors.append(_error(
                        "return_type_mismatch", "Return type mismatch between linked nodes",
                        f"{x}, received_type({received}) mismatch input_type({input_type})",
                        {"input_name": x, "input_config": info, "received_type": received, "linked_node": val}))
                    continue
                if validate_inputs(nodes, prompt, o_id, validated)[0] is False:
                    valid = False
                continue
            if isinstance(val, dict) and "__value__" in val:
                val = inputs[x] = val["__value__"]
            try:
                val = _convert(input_type, val)
            except (TypeError, ValueError) as ex:
                errors.append(_error("invalid_input_type", f"Failed to convert an input value to a {input_type} value",
                                     f"{x}, {val}, {ex}", {"input_name": x, "input_config": info,
                                                           "received_value": val, "exception_message": str(ex)}))
                continue
            if x in custom:
                continue
            if "min" in extra_info and val < extra_info["min"]:
                errors.append(_error("value_smaller_than_min", f"Value {val} smaller than min of {extra_info['min']}",
                                     x, {"input_name": x, "input_config": info, "received_value": val}))
                continue
            if "max" in extra_info and val > extra_info["max"]:
                errors.append(_error("value_bigger_than_max", f"Value {val} bigger than max of {extra_info['max']}",
                                     x, {"input_name": x, "input_config": info, "received_value": val}))
                continue
            options = input_type if isinstance(input_type, list) else \
                extra_info.get("options") if input_type == "COMBO" else None
            if options is not None and val not in options:
                big = len(options) > 20
                errors.append(_error("value_not_in_list", "Value not in list",
                                     f"{x}: '{val}' not in {f'(list of length {len(options)})' if big else options}",
                                     {"input_name": x, "input_config": None if big else info,
                                      "received_value": val}))
    for x, why in custom.items():
        if why is not None:
            errors.append(_error("custom_validation_failed", "Custom validation failed for node",
                                 f"{x} - {why}", {"input_name": x}))
    result = (False, errors, unique_id) if errors or not valid else (True, [], unique_id)
    validated[unique_id] = result
    return result


def validate_prompt(nodes, prompt, partial):
    """(ok, error, outputs, node_errors) as execution.validate_prompt."""
    if not isinstance(prompt, dict):
        return False, _error("invalid_prompt", "Cannot execute because the prompt is not an object."), [], {}
    outputs = []
    for x, node in prompt.items():
        if not isinstance(node, dict) or "class_type" not in node:
            return False, _error("invalid_prompt", "Cannot execute because a node is missing the class_type property.",
                                 f"Node ID '#{x}'"), [], {}
        cls = node["class_type"]
        if not nodes.has(cls):
            return False, _error("invalid_prompt", f"Cannot execute because node {cls} does not exist.",
                                 f"Node ID '#{x}'"), [], {}
        node.setdefault("inputs", {})
        if nodes.output_node(cls) and (partial is None or x in partial):
            outputs.append(x)
    if not outputs:
        return False, _error("prompt_no_outputs", "Prompt has no outputs"), [], {}
    good, errors, node_errors, validated = [], [], {}, {}
    for o in outputs:
        valid, reasons, _ = validate_inputs(nodes, prompt, o, validated)
        if valid:
            good.append(o)
            continue
        errors.append((o, reasons))
        for node_id, (ok, node_reasons, _) in validated.items():
            if ok is not True and node_reasons:
                entry = node_errors.setdefault(node_id, {"errors": node_reasons, "dependent_outputs": [],
                                                         "class_type": prompt[node_id]["class_type"]})
                entry["dependent_outputs"].append(o)
    if not good:
        details = "\n".join(f"{e['message']}: {e['details']}" for _, reasons in errors for e in reasons)
        return False, _error("prompt_outputs_failed_validation", "Prompt outputs failed validation", details), [], \
            node_errors
    return True, None, good, node_errors
