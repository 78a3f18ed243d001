#!/usr/bin/python3
"""h3pipe's node pack saves and loads an H3 AV latent (one NestedTensor((video, audio))) the same in
a real ComfyUI and in FakeComfyUiServer --exec-python-nodes h3pipe_nodes,h3_standins.

A real ComfyUI 0.3.64 has no H3 classes and no comfy.nested_tensor; this starts one (from a
checkout, ../shared/comfyui/README.md) with two custom nodes in a fresh base directory: h3pipe's
pack, and a shim registering, from h3_standin_nodes.py, only the classes that ComfyUI lacks
(EmptyMiniMaxH3LatentAV makes ComfyUI's shapes; H3TestNestedProbe reports what a LATENT holds;
ComfyUI ignores a custom class whose name it already has). Then, on both servers:
  A. EmptyMiniMaxH3LatentAV 256x160x22 -> H3SaveLatent (profile minimax-h3) and the probe;
  B. H3LoadLatent of an uploaded nonzero nested latent -> H3SaveLatent and the probe.
  C. GET /object_info of each of the pack's classes.
Checks: C is equal on both servers (the fake builds it from INPUT_TYPES as server.py does); A's files are byte-identical across the servers; B saves the loaded file back byte for
byte on both; the probes agree on every stream's shape, dtype and SHA-256 (the class may differ:
the pack's stand-in where ComfyUI has no NestedTensor). Prints what each server answered.
Usage: h3_pack_real_vs_fake.py --comfy CHECKOUT [--stubs DIR]. Exit 0: the same. Not in ctest
(it needs a ComfyUI checkout); standard library + torch.
"""
import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
PACK = os.path.abspath(os.path.join(HERE, "..", "..", "integrations", "comfyui", "h3pipe_nodes"))

SHIM = """import sys
sys.path.insert(0, {here!r})
import h3_standin_nodes as n
import h3_standin_specs as s
NODE_CLASS_MAPPINGS = {{}}
for name in ("EmptyMiniMaxH3LatentAV", "H3TestNestedProbe"):
    cls, spec = n.NODE_CLASS_MAPPINGS[name], s.SPECS[name]
    cls.RETURN_TYPES = tuple(spec["output"])
    cls.OUTPUT_NODE = spec["output_node"]
    cls.CATEGORY = spec["category"]
    NODE_CLASS_MAPPINGS[name] = cls
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url, body=None, ctype="application/json", timeout=30):
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    req = urllib.request.Request(url, data, {"Content-Type": ctype} if data is not None else {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read()


def wait_up(url, proc, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"the server at {url} exited with {proc.returncode}")
        try:
            http(url + "/system_stats", timeout=2)
            return
        except (urllib.error.URLError, OSError):
            time.sleep(0.25)
    raise SystemExit(f"{url} did not answer /system_stats within {seconds} s")


def upload(url, name, data, subfolder):
    b = uuid.uuid4().hex
    parts = [(f'--{b}\r\nContent-Disposition: form-data; name="image"; filename="{name}"\r\n'
              "Content-Type: application/octet-stream\r\n\r\n").encode() + data + b"\r\n"]
    for k, v in (("subfolder", subfolder), ("overwrite", "true")):
        parts.append(f'--{b}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode())
    http(url + "/upload/image", b"".join(parts) + f"--{b}--\r\n".encode(),
         f"multipart/form-data; boundary={b}")


def run_prompt(url, prompt, seconds=120):
    pid = json.loads(http(url + "/prompt", {"prompt": prompt}))["prompt_id"]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        h = json.loads(http(f"{url}/history/{pid}"))
        if h:
            entry = h[pid]
            if entry["status"]["status_str"] != "success":
                raise SystemExit(f"{url}: prompt failed: {json.dumps(entry['status']['messages'])[:2000]}")
            return entry["outputs"]
        time.sleep(0.1)
    raise SystemExit(f"{url}: prompt {pid} did not finish in {seconds} s")


def view(url, ref):
    q = urllib.parse.urlencode({"filename": ref["filename"], "subfolder": ref["subfolder"], "type": ref["type"]})
    return http(f"{url}/view?{q}")


def nonzero_latent(tmp):
    """(bytes, sidecar line) of a seeded nested H3 latent saved by the pack itself."""
    os.environ["H3PIPE_COMFY_OUTPUT"] = os.path.join(tmp, "mk_out")
    os.environ["H3PIPE_COMFY_INPUT"] = os.path.join(tmp, "mk_in")
    sys.path.insert(0, os.path.dirname(PACK))
    import torch
    from h3pipe_nodes import nested, nodes
    g = torch.Generator().manual_seed(21)
    video, audio = torch.randn([1, 24, 7, 10, 16], generator=g), torch.randn([1, 32, 2, 37], generator=g)
    ui = nodes.H3SaveLatent().save({"samples": nested.NestedTensorStandIn([video, audio])}, "h3t/src",
                                   profile="minimax-h3", width=256, height=160, frames=22, fps=24)
    ref = ui["ui"]["latents"][0]
    path = os.path.join(os.environ["H3PIPE_COMFY_OUTPUT"], ref["subfolder"], ref["filename"])
    with open(path, "rb") as f:
        return f.read()


def exercise(url, latent):
    sha = hashlib.sha256(latent).hexdigest()
    upload(url, "src.h3latent", latent, "h3t")
    upload(url, "src.h3latent.sha256", f"{sha}  src.h3latent\n".encode(), "h3t")
    out = {}
    a = run_prompt(url, {
        "1": {"class_type": "EmptyMiniMaxH3LatentAV", "inputs": {"width": 256, "height": 160, "length": 22}},
        "2": {"class_type": "H3SaveLatent", "inputs": {"samples": ["1", 0], "filename_prefix": "h3t/empty",
                                                       "profile": "minimax-h3", "width": 256, "height": 160,
                                                       "frames": 22, "fps": 24}},
        "3": {"class_type": "H3TestNestedProbe", "inputs": {"samples": ["1", 0]}}})
    out["A_file_sha256"] = hashlib.sha256(view(url, a["2"]["latents"][0])).hexdigest()
    out["A_probe"] = a["3"]["nested"][0]
    b = run_prompt(url, {
        "1": {"class_type": "H3LoadLatent", "inputs": {"path": "h3t/src.h3latent"}},
        "2": {"class_type": "H3SaveLatent", "inputs": {"samples": ["1", 0], "filename_prefix": "h3t/again",
                                                       "profile": "minimax-h3", "width": 256, "height": 160,
                                                       "frames": 22, "fps": 24}},
        "3": {"class_type": "H3TestNestedProbe", "inputs": {"samples": ["1", 0]}}})
    out["B_source_sha256"] = sha
    out["B_file_sha256"] = hashlib.sha256(view(url, b["2"]["latents"][0])).hexdigest()
    out["B_probe"] = b["3"]["nested"][0]
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--comfy", required=True, help="a ComfyUI checkout (main.py)")
    p.add_argument("--stubs", default="", help="PYTHONPATH for modules Debian lacks (README)")
    p.add_argument("--start-seconds", type=int, default=240)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="h3realfake_") as tmp:
        base, fe = os.path.join(tmp, "base"), os.path.join(tmp, "fe")
        os.makedirs(os.path.join(base, "custom_nodes", "h3_test_standins"))
        os.makedirs(fe)
        os.symlink(PACK, os.path.join(base, "custom_nodes", "h3pipe_nodes"))
        with open(os.path.join(base, "custom_nodes", "h3_test_standins", "__init__.py"), "w") as f:
            f.write(SHIM.format(here=HERE))
        latent = nonzero_latent(tmp)
        rport = free_port()
        env = dict(os.environ, PYTHONPATH=args.stubs)
        for k in ("H3PIPE_COMFY_OUTPUT", "H3PIPE_COMFY_INPUT"):
            env.pop(k, None)  # inside ComfyUI the pack uses folder_paths
        with open(os.path.join(tmp, "comfy.log"), "w") as log:
            real = subprocess.Popen(["/usr/bin/python3", "main.py", "--cpu", "--listen", "127.0.0.1", "--port",
                                     str(rport), "--disable-api-nodes", "--front-end-root", fe, "--base-directory",
                                     base, "--database-url", "sqlite:///:memory:"], cwd=args.comfy, env=env,
                                    stdout=log, stderr=subprocess.STDOUT)
        fake = subprocess.Popen(["/usr/bin/python3", os.path.join(HERE, "fake_comfyui_server.py"), "--root",
                                 os.path.join(tmp, "fake"), "--port", "0", "--exec-python-nodes",
                                 "h3pipe_nodes,h3_standins"], stdout=subprocess.PIPE, text=True)
        try:
            furl = "http://127.0.0.1:%d" % int(fake.stdout.readline().split()[1])
            rurl = f"http://127.0.0.1:{rport}"
            t0 = time.monotonic()
            wait_up(rurl, real, args.start_seconds)
            print(f"real ComfyUI up in {time.monotonic() - t0:.1f} s: "
                  f"{json.loads(http(rurl + '/system_stats'))['system']['comfyui_version']}")
            results = {"real": exercise(rurl, latent), "fake": exercise(furl, latent)}
            pack = ("H3SaveLatent", "H3LoadLatent", "H3SaveConditioning", "H3LoadConditioning")
            info_differs = [c for c in pack if json.loads(http(f"{rurl}/object_info/{c}"))
                            != json.loads(http(f"{furl}/object_info/{c}"))]
        except SystemExit:
            with open(os.path.join(tmp, "comfy.log")) as f:
                sys.stderr.write(f.read()[-4000:])
            raise
        finally:
            for proc in (real, fake):
                proc.terminate()
                proc.wait(timeout=30)
    print(json.dumps(results, indent=1))
    r, f = results["real"], results["fake"]
    strip = lambda probe: {k: v for k, v in probe.items() if k != "class"}  # noqa: E731
    checks = {
        f"C: /object_info of the pack's classes is equal (differs: {info_differs})": not info_differs,
        "A: the empty H3 latent files are byte-identical": r["A_file_sha256"] == f["A_file_sha256"],
        "A: the probes agree (shapes, dtypes, bytes)": strip(r["A_probe"]) == strip(f["A_probe"]),
        "B: the real server saves the loaded latent back byte for byte": r["B_file_sha256"] == r["B_source_sha256"],
        "B: the fake saves the loaded latent back byte for byte": f["B_file_sha256"] == f["B_source_sha256"],
        "B: the probes agree (shapes, dtypes, bytes)": strip(r["B_probe"]) == strip(f["B_probe"]),
    }
    for what, ok in checks.items():
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
    print(f"loaded class: real {r['B_probe']['class']}, fake {f['B_probe']['class']}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
