"""Sprig / Helm functions for tests/deploy/helm_render.py (the subset helm/h3pipe calls)."""
import base64
import copy
import hashlib
import json
import random
import string
import urllib.parse

import yaml


class TemplateError(Exception):
    pass


class TrackedDict(dict):
    """A values map that records reads (helm_render.track builds them)."""
    path = ""
    missing = set()

    def lookup(self, key):
        if key in self:
            READS.add(f"{self.path}.{key}")
            return dict.__getitem__(self, key)
        self.missing.add(f"{self.path}.{key}")
        return None


READS = set()  # every .Values path read through a TrackedDict (see helm_render.unread_values)


def plain(v):
    """Deep copy into plain dict/list (deepCopy, toYaml, toJson)."""
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v


def truthy(v):
    if v is None or v is False:
        return False
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return v != 0
    if isinstance(v, (str, list, dict, tuple)):
        return len(v) > 0
    return True


def go_str(v):
    if v is None:
        return ""
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, (dict, list)):
        return json.dumps(plain(v))
    return str(v)


def go_printf(fmt, *args):
    out, ai, i = [], 0, 0
    while i < len(fmt):
        c = fmt[i]
        if c == "%" and i + 1 < len(fmt):
            v = fmt[i + 1]
            i += 2
            if v == "%":
                out.append("%")
                continue
            arg = args[ai]
            ai += 1
            if v in ("s", "v"):
                out.append(go_str(arg))
            elif v == "d":
                out.append(str(int(arg)))
            elif v == "q":
                out.append(json.dumps(go_str(arg)))
            else:
                raise TemplateError(f"printf verb %{v} unsupported")
            continue
        out.append(c)
        i += 1
    return "".join(out)


def to_yaml(v):
    if v is None:
        return "null"
    s = yaml.safe_dump(plain(v), default_flow_style=False, sort_keys=True, width=10000)
    return s[:-1] if s.endswith("\n") else s


def indent(n, s):
    pad = " " * int(n)
    return "\n".join(pad + line for line in go_str(s).split("\n"))


def go_and(*a):
    for x in a:
        if not truthy(x):
            return x
    return a[-1]


def go_or(*a):
    for x in a:
        if truthy(x):
            return x
    return a[-1]


def go_index(coll, *keys):
    for k in keys:
        if coll is None:
            raise TemplateError("index of nil")
        if isinstance(coll, TrackedDict):
            coll = coll.lookup(k)
        elif isinstance(coll, dict):
            coll = coll.get(k)
        else:
            coll = coll[int(k)]
    return coll


def url_parse(u):
    p = urllib.parse.urlsplit(u)
    return {"scheme": p.scheme, "host": p.netloc.rsplit("@", 1)[-1], "hostname": p.hostname or "",
            "path": p.path, "query": p.query, "fragment": p.fragment, "opaque": "",
            "userinfo": p.netloc.rsplit("@", 1)[0] if "@" in p.netloc else ""}


def go_set(d, k, v):
    dict.__setitem__(d, k, v)
    return d


def sha256sum(s):
    return hashlib.sha256(go_str(s).encode()).hexdigest()


FUNCS = {
    "quote": lambda *a: " ".join(json.dumps(go_str(x)) for x in a),
    "squote": lambda *a: " ".join("'" + go_str(x) + "'" for x in a),
    "default": lambda d, v=None: v if truthy(v) else d,
    "required": None,  # needs the renderer (error message)
    "toYaml": to_yaml,
    "toJson": lambda v: json.dumps(plain(v), sort_keys=True, separators=(",", ":")),
    "toPrettyJson": lambda v: json.dumps(plain(v), sort_keys=True, indent=2),
    "fromJson": lambda s: json.loads(s),
    "nindent": lambda n, s: "\n" + indent(n, s),
    "indent": indent,
    "printf": go_printf,
    "print": lambda *a: "".join(go_str(x) for x in a),
    "eq": lambda a, *b: any(a == x for x in b),
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b, "gt": lambda a, b: a > b,
    "le": lambda a, b: a <= b, "ge": lambda a, b: a >= b,
    "and": go_and, "or": go_or, "not": lambda v: not truthy(v),
    "empty": lambda v: not truthy(v),
    "dict": lambda *a: {a[i]: a[i + 1] for i in range(0, len(a), 2)},
    "list": lambda *a: list(a),
    "append": lambda l, v: list(l or []) + [v],
    "set": go_set,
    "hasKey": lambda d, k: k in d,
    "deepCopy": lambda v: copy.deepcopy(plain(v)),
    "until": lambda n: list(range(int(n))),
    "len": lambda v: len(v or []),
    "int": lambda v: int(float(v)) if v not in (None, "") else 0,
    "toString": go_str,
    "trunc": lambda n, s: go_str(s)[:int(n)],
    "trimSuffix": lambda suf, s: go_str(s)[:-len(suf)] if suf and go_str(s).endswith(suf) else go_str(s),
    "contains": lambda sub, s: sub in go_str(s),
    "b64enc": lambda s: base64.b64encode(go_str(s).encode()).decode(),
    "b64dec": lambda s: base64.b64decode(go_str(s)).decode(),
    "sha256sum": sha256sum,
    "urlParse": url_parse,
    "splitList": lambda sep, s: go_str(s).split(sep),
    "first": lambda l: l[0] if l else None,
    "last": lambda l: l[-1] if l else None,
    "index": go_index,
    "randAlphaNum": lambda n: "".join(random.choice(string.ascii_letters + string.digits) for _ in range(int(n))),
    "lookup": lambda *a: {},  # as `helm template`: no cluster to look into
    "include": None,  # needs the renderer
}


