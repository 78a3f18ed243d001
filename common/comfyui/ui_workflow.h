#pragma once
// A workflow saved by ComfyUI's editor ("UI format": {"nodes": [...], "links": [...]}) turned into
// the API format the server queues, the way the frontend's "Export (API)" does: widget values
// mapped to input names in the order /object_info lists the class's inputs (the extra
// control_after_generate and upload values skipped), links resolved through Reroute nodes and
// bypassed nodes, PrimitiveNode values written into the inputs they feed, muted nodes and notes
// left out.  Pure: the caller fetches /object_info.
#include "common/comfyui/object_info.h"

namespace h3pipe::comfyui {

bool is_ui_format(const Json& j);  // has "nodes" (array) and "links"

// Errors: comfyui.ui.* naming the node (id, type) and what is wrong; comfyui.split.unknown_class
// for a class the server does not know; comfyui.ui.subgraph for a subgraph node (not supported:
// convert it to nodes in the editor first).
Result<Json> ui_to_api(const Json& ui, const ObjectInfo& oi);

}  // namespace h3pipe::comfyui
