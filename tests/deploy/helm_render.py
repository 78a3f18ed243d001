#!/usr/bin/python3
"""A test-only renderer for the subset of Helm's Go templates that helm/h3pipe uses.

Helm is not packaged in Debian, so tests/deploy/helm_chart_test.py renders the chart with this
module instead.  It implements text/template's actions (if / else if / else, range with one or
two variables over lists and maps, with, define, variables with := and =, pipelines,
parenthesised pipelines with field access, {{- -}} trimming, comments) and the Sprig / Helm
functions the chart calls (FUNCS below).  Anything outside that subset raises TemplateError, so
a template that starts using a new function fails the test instead of rendering wrongly.

Missing keys: reading a key that values.yaml does not define (at any depth, through .Values or a
value reached from it) is recorded in Renderer.missing, which the test asserts is empty.
"""
import copy
import json
import os
import re

import yaml

from helm_funcs import FUNCS, READS, TemplateError, TrackedDict, go_str, truthy  # noqa: F401


# ---------------------------------------------------------------------------------------------
# Values that remember where they came from, to report reads of undefined keys.

def tracked_dict(data, path, missing):
    d = TrackedDict()
    d.path, d.missing = path, missing
    for k, v in data.items():
        dict.__setitem__(d, k, track(v, f"{path}.{k}", missing))
    return d


class TrackedList(list):
    def __init__(self, data, path, missing):
        super().__init__(track(v, f"{path}[{i}]", missing) for i, v in enumerate(data))


def track(v, path, missing):
    if isinstance(v, dict) and not isinstance(v, TrackedDict):
        return tracked_dict(v, path, missing)
    if isinstance(v, list) and not isinstance(v, TrackedList):
        return TrackedList(v, path, missing)
    return v


# ---------------------------------------------------------------------------------------------
# Lexing and parsing.

ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.S)


def lex(src):
    """[('text', s) | ('action', s)] with trim markers applied."""
    out, pos = [], 0
    for m in ACTION.finditer(src):
        text = src[pos:m.start()]
        if m.group(1):
            text = text.rstrip(" \t\r\n")
        out.append(("text", text))
        body = m.group(2).strip()
        out.append(("action", body, bool(m.group(3))))
        pos = m.end()
    out.append(("text", src[pos:]))
    # Apply right-trim to the following text.
    res = []
    trim_next = False
    for tok in out:
        if tok[0] == "text":
            t = tok[1].lstrip(" \t\r\n") if trim_next else tok[1]
            trim_next = False
            if t:
                res.append(("text", t))
        else:
            trim_next = tok[2]
            if not (tok[1].startswith("/*") and tok[1].endswith("*/")):
                res.append(("action", tok[1]))
    return res


TOKEN = re.compile(r"""\s*(?:
    (?P<str>"(?:\\.|[^"\\])*")|
    (?P<raw>`[^`]*`)|
    (?P<num>-?\d+(?:\.\d+)?)|
    (?P<assign>:=|=)|
    (?P<pipe>\|)|
    (?P<lp>\()|(?P<rp>\))|
    (?P<comma>,)|
    (?P<var>\$[A-Za-z0-9_]*)|
    (?P<field>(?:\.[A-Za-z0-9_]+)+|\.)|
    (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    )""", re.X)


def tokens(s):
    out, pos = [], 0
    while pos < len(s):
        if s[pos:].strip() == "":
            break
        m = TOKEN.match(s, pos)
        if not m or m.end() == pos:
            raise TemplateError(f"cannot parse action at: {s[pos:]!r}")
        kind = m.lastgroup
        val = m.group(kind)
        # A field access glued to a closing paren or variable: (x).a, $v.a
        if kind in ("var",) and m.end() < len(s) and s[m.end()] == ".":
            fm = re.compile(r"(?:\.[A-Za-z0-9_]+)+").match(s, m.end())
            val = (val, fm.group(0))
            out.append(("varfield", val))
            pos = fm.end()
            continue
        if kind == "rp" and m.end() < len(s) and s[m.end()] == ".":
            fm = re.compile(r"(?:\.[A-Za-z0-9_]+)+").match(s, m.end())
            out.append(("rp", ")"))
            out.append(("postfield", fm.group(0)))
            pos = fm.end()
            continue
        out.append((kind, val))
        pos = m.end()
    return out


class Pipeline:
    def __init__(self, decl, assign, cmds):
        self.decl, self.assign, self.cmds = decl, assign, cmds


def parse_pipeline(toks, i=0, stop=None):
    """Returns (Pipeline, next index).  stop: token kind that ends the pipeline (rp)."""
    decl, assign = [], None
    # $a := / $a, $b := / $a =
    j = i
    names = []
    while j < len(toks) and toks[j][0] == "var":
        names.append(toks[j][1])
        j += 1
        if j < len(toks) and toks[j][0] == "comma":
            j += 1
            continue
        break
    if names and j < len(toks) and toks[j][0] == "assign":
        decl, assign = names, toks[j][1]
        i = j + 1
    cmds, cmd = [], []
    while i < len(toks):
        kind, val = toks[i]
        if stop and kind == stop:
            break
        if kind == "pipe":
            cmds.append(cmd)
            cmd = []
            i += 1
            continue
        if kind == "lp":
            sub, i = parse_pipeline(toks, i + 1, stop="rp")
            i += 1  # the ')'
            node = ("sub", sub)
            if i < len(toks) and toks[i][0] == "postfield":
                node = ("subfield", sub, toks[i][1])
                i += 1
            cmd.append(node)
            continue
        cmd.append((kind, val))
        i += 1
    if cmd:
        cmds.append(cmd)
    return Pipeline(decl, assign, cmds), i


def parse_pipe_text(text):
    p, _ = parse_pipeline(tokens(text))
    return p


def parse(tokens_list, defines, name):
    """Tree: list of ('text', s) / ('action', Pipeline) / ('if', [(p, body)], else) /
    ('range', p, body, else) / ('with', p, body, else)."""
    pos = 0

    def block(stop_words):
        nonlocal pos
        body = []
        while pos < len(tokens_list):
            tok = tokens_list[pos]
            if tok[0] == "text":
                body.append(("text", tok[1]))
                pos += 1
                continue
            a = tok[1]
            word = a.split(None, 1)[0] if a else ""
            rest = a[len(word):].strip()
            if word in stop_words:
                return body, word, rest
            pos += 1
            if word == "if":
                branches, els = [(parse_pipe_text(rest), None)], None
                b, w, r = block({"else", "end"})
                branches[0] = (branches[0][0], b)
                while w == "else":
                    pos += 1
                    if r.startswith("if "):
                        cond = parse_pipe_text(r[3:])
                        b, w, r = block({"else", "end"})
                        branches.append((cond, b))
                    else:
                        els, w, r = block({"end"})
                pos += 1
                body.append(("if", branches, els))
            elif word in ("range", "with"):
                p = parse_pipe_text(rest)
                b, w, r = block({"else", "end"})
                els = None
                if w == "else":
                    pos += 1
                    els, w, r = block({"end"})
                pos += 1
                body.append((word, p, b, els))
            elif word == "define":
                dname = json.loads(rest)
                b, w, r = block({"end"})
                pos += 1
                defines[dname] = b
            elif word in ("end", "else"):
                raise TemplateError(f"{name}: unexpected {word}")
            elif word in ("template", "block", "break", "continue"):
                raise TemplateError(f"{name}: '{word}' is outside the supported subset")
            else:
                body.append(("action", parse_pipe_text(a)))
        if stop_words:
            raise TemplateError(f"{name}: missing {{{{ end }}}}")
        return body, None, None

    body, _, _ = block(set())
    return body


class Files:
    def __init__(self, root):
        self.root = root

    def Get(self, name):  # noqa: N802 (Helm's spelling)
        p = os.path.join(self.root, name)
        if not os.path.isfile(p):
            return ""
        with open(p) as f:
            return f.read()


# ---------------------------------------------------------------------------------------------

class Renderer:
    def __init__(self, chart_dir, values, release="h3", namespace="default"):
        self.chart_dir = chart_dir
        with open(os.path.join(chart_dir, "Chart.yaml")) as f:
            chart = yaml.safe_load(f)
        self.chart_name = chart["name"]
        self.missing = set()
        self.root = {
            "Values": track(values, ".Values", self.missing),
            "Release": {"Name": release, "Namespace": namespace, "Service": "Helm", "IsInstall": True,
                        "IsUpgrade": False, "Revision": 1},
            "Chart": {"Name": chart["name"], "Version": chart["version"], "AppVersion": chart.get("appVersion", "")},
            "Files": Files(chart_dir),
            "Template": {"BasePath": f"{chart['name']}/templates", "Name": ""},
        }
        self.defines = {}
        self.files = {}
        tdir = os.path.join(chart_dir, "templates")
        for fn in sorted(os.listdir(tdir)):
            with open(os.path.join(tdir, fn)) as f:
                src = f.read()
            name = f"{chart['name']}/templates/{fn}"
            tree = parse(lex(src), self.defines, name)
            self.files[fn] = tree
            self.defines[name] = tree

    # --- evaluation ---
    def field(self, obj, path):
        for k in [p for p in path.split(".") if p]:
            if obj is None:
                return None
            if isinstance(obj, TrackedDict):
                obj = obj.lookup(k)
            elif isinstance(obj, dict):
                if k not in obj and any(obj is v for v in (self.root, self.root["Release"], self.root["Chart"])):
                    raise TemplateError(f"no field {k}")
                obj = obj.get(k)
            elif hasattr(obj, k):
                obj = getattr(obj, k)
            else:
                raise TemplateError(f"cannot read .{k} of {type(obj).__name__}")
        return obj

    def lookup_var(self, scopes, name):
        for s in reversed(scopes):
            if name in s:
                return s[name]
        raise TemplateError(f"undefined variable {name}")

    def operand(self, node, dot, scopes):
        kind = node[0]
        if kind == "str":
            return json.loads(node[1])
        if kind == "raw":
            return node[1][1:-1]
        if kind == "num":
            return float(node[1]) if "." in node[1] else int(node[1])
        if kind == "field":
            return dot if node[1] == "." else self.field(dot, node[1])
        if kind == "var":
            return self.lookup_var(scopes, node[1])
        if kind == "varfield":
            return self.field(self.lookup_var(scopes, node[1][0]), node[1][1])
        if kind == "sub":
            return self.pipeline(node[1], dot, scopes)
        if kind == "subfield":
            return self.field(self.pipeline(node[1], dot, scopes), node[2])
        if kind == "ident":
            if node[1] in ("true", "false"):
                return node[1] == "true"
            if node[1] == "nil":
                return None
            return self.call(node[1], [], dot, scopes)
        raise TemplateError(f"unexpected {node}")

    def call(self, fname, args, dot, scopes):
        if fname == "include":
            return self.include(args[0], args[1])
        if fname == "required":
            if not truthy(args[1]) and args[1] is not False:
                raise TemplateError(f"required: {args[0]}")
            return args[1]
        f = FUNCS.get(fname)
        if f is None:
            raise TemplateError(f"function {fname!r} is outside the supported subset")
        return f(*args)

    def command(self, cmd, dot, scopes, piped, has_piped):
        head = cmd[0]
        if head[0] == "ident" and head[1] not in ("true", "false", "nil"):
            args = [self.operand(n, dot, scopes) for n in cmd[1:]]
            if has_piped:
                args.append(piped)
            return self.call(head[1], args, dot, scopes)
        if head[0] == "field" and len(cmd) > 1 or (head[0] == "field" and has_piped):
            # A method call: .Files.Get "x"
            base, _, meth = head[1].rpartition(".")
            obj = self.field(dot, base) if base else dot
            fn = getattr(obj, meth)
            args = [self.operand(n, dot, scopes) for n in cmd[1:]]
            if has_piped:
                args.append(piped)
            return fn(*args)
        if len(cmd) > 1 or has_piped:
            raise TemplateError(f"cannot call {head}")
        v = self.operand(head, dot, scopes)
        return v

    def pipeline(self, p, dot, scopes, declare=True):
        val, has = None, False
        for cmd in p.cmds:
            val = self.command(cmd, dot, scopes, val, has)
            has = True
        if p.decl:
            if p.assign == ":=" and declare:
                scopes[-1][p.decl[-1]] = val
            elif p.assign == "=":
                for s in reversed(scopes):
                    if p.decl[-1] in s:
                        s[p.decl[-1]] = val
                        break
                else:
                    raise TemplateError(f"assignment to undeclared {p.decl[-1]}")
            return None
        return val

    def exec(self, tree, dot, scopes, out):
        for node in tree:
            kind = node[0]
            if kind == "text":
                out.append(node[1])
            elif kind == "action":
                v = self.pipeline(node[1], dot, scopes)
                if not node[1].decl:
                    out.append(go_str(v))
            elif kind == "if":
                done = False
                for cond, body in node[1]:
                    if truthy(self.pipeline(cond, dot, scopes)):
                        scopes.append({})
                        self.exec(body, dot, scopes, out)
                        scopes.pop()
                        done = True
                        break
                if not done and node[2] is not None:
                    scopes.append({})
                    self.exec(node[2], dot, scopes, out)
                    scopes.pop()
            elif kind == "with":
                v = self.pipeline(Pipeline([], None, node[1].cmds), dot, scopes)
                if truthy(v):
                    scopes.append({})
                    if node[1].decl:
                        scopes[-1][node[1].decl[-1]] = v
                    self.exec(node[2], v, scopes, out)
                    scopes.pop()
                elif node[3] is not None:
                    self.exec(node[3], dot, scopes, out)
            elif kind == "range":
                p = node[1]
                coll = self.pipeline(Pipeline([], None, p.cmds), dot, scopes)
                items = []
                if isinstance(coll, dict):
                    items = [(k, coll[k]) for k in sorted(coll)]
                elif isinstance(coll, (list, tuple)):
                    items = list(enumerate(coll))
                elif isinstance(coll, int):
                    items = [(i, i) for i in range(coll)]
                elif coll is not None:
                    raise TemplateError(f"range over {type(coll).__name__}")
                if not items and node[3] is not None:
                    self.exec(node[3], dot, scopes, out)
                for k, v in items:
                    s = {}
                    if len(p.decl) == 1:
                        s[p.decl[0]] = v
                    elif len(p.decl) == 2:
                        s[p.decl[0]], s[p.decl[1]] = k, v
                    scopes.append(s)
                    self.exec(node[2], v, scopes, out)
                    scopes.pop()
            else:
                raise TemplateError(f"node {kind}")

    def include(self, name, data):
        if name not in self.defines:
            raise TemplateError(f"no template {name!r}")
        out = []
        # As in text/template, $ is the data the template was invoked with.
        self.exec(self.defines[name], data, [{"$": data}], out)
        return "".join(out)

    def render(self, fn):
        self.root["Template"]["Name"] = f"{self.chart_name}/templates/{fn}"
        out = []
        self.exec(self.files[fn], self.root, [{"$": self.root}], out)
        return "".join(out)

    def render_all(self):
        """{file: text} for every template that is not a partial (_*.tpl)."""
        return {fn: self.render(fn) for fn in self.files if not fn.startswith("_")}


def leaf_paths(v, path=".Values"):
    if isinstance(v, dict) and v:
        for k, x in v.items():
            yield from leaf_paths(x, f"{path}.{k}")
    elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
        for i, x in enumerate(v):
            yield from leaf_paths(x, f"{path}[{i}]")
    else:
        yield path


def unread_values(values):
    """Leaves of values.yaml that no template read (itself or through a parent)."""
    def read(p):
        while True:
            if p in READS:
                return True
            cut = max(p.rfind("."), p.rfind("["))
            if cut <= len(".Values"):
                return False
            p = p[:cut]
    return sorted(p for p in leaf_paths(values) if not read(p))


def load_values(chart_dir, *overrides):
    with open(os.path.join(chart_dir, "values.yaml")) as f:
        values = yaml.safe_load(f)

    def merge(a, b):
        for k, v in b.items():
            if isinstance(v, dict) and isinstance(a.get(k), dict):
                merge(a[k], v)
            else:
                a[k] = v
    for o in overrides:
        merge(values, copy.deepcopy(o))
    return values


if __name__ == "__main__":
    import sys
    chart = sys.argv[1] if len(sys.argv) > 1 else "helm/h3pipe"
    r = Renderer(chart, load_values(chart))
    for fn, text in r.render_all().items():
        print(f"# Source: {fn}\n{text}\n---")
    if r.missing:
        print("undefined values read:", sorted(r.missing), file=sys.stderr)
