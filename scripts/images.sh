#!/usr/bin/env bash
# scripts/images.sh: builds h3pipe's container images with podman (docs/deploy.md, "Images").
#
#   scripts/images.sh [--version V] [--targets "encoder sampler ..."] [--standins] [--no-cache]
#                     [--rebuild-base]     scripts/images.sh --containers-conf FILE
#
# 1. Base images.  docker/Dockerfile starts FROM ${DEBIAN_IMAGE} (debian:12) and
#    ${DEBIAN_SLIM_IMAGE} (debian:12-slim).  Where no image registry is reachable, this script
#    makes both locally: one `debootstrap --variant=minbase bookworm` rootfs, imported with
#    `podman import` as localhost/h3pipe-base/debian:12, and the same rootfs with docs, man pages
#    and locales removed (and dpkg told to keep them out, as Debian's slim images do) as
#    localhost/h3pipe-base/debian:12-slim.  Made once per machine and key (the suite, the
#    mirrors and this script's make_base, hashed: a label on both images); the two rootfs
#    tarballs are also kept in ${H3PIPE_CACHE:-/var/cache/h3pipe}/base-<key>-{full,slim}.tar, so
#    a wiped podman store re-imports them in seconds instead of running debootstrap again.
#    --rebuild-base makes them again from debootstrap.  H3PIPE_DEBIAN_IMAGE / H3PIPE_DEBIAN_SLIM_IMAGE name other bases instead
#    (e.g. docker.io/library/debian:12 where a registry is reachable); nothing is made then.
# 2. Targets.  Every target of docker/Dockerfile (encoder sampler decoder transfer api cli stunnel by
#    default) with `podman build --layers`, tagged ${H3PIPE_IMAGE_PREFIX:-h3pipe}/<target>:<version>
#    (the names compose.yaml and helm/h3pipe expect; version: CMakeLists.txt's project version).
#    The api image carries the console (ui/, bundled here with node: ui/node_modules needed).
#    The build stage is built once and cached; a second run is all cache hits.
# 3. --standins: test-only stand-ins, from Debian's packages, for the public images compose.yaml
#    pulls (redis:7.2-bookworm, prom/prometheus), tagged localhost/h3pipe-standin/{redis,prometheus}
#    (tests/deploy/standins/Containerfile): same entrypoint contract, never for production.
#
# Prints each image's size and the build wall times; the last line is one JSON object.
# Environment: H3PIPE_DEBIAN_MIRROR (default http://deb.debian.org/debian),
#   H3PIPE_DEBIAN_SECURITY (default http://deb.debian.org/debian-security), H3PIPE_IMAGE_PREFIX.
# Heavy steps run under `nice -n 19`; one build at a time.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "images: $*" >&2; exit 1; }

version=$(sed -n 's/^project(h3pipe VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
targets=(encoder sampler decoder transfer api cli stunnel)
standins=0 no_cache=() rebuild_base=0 conf_only=""
while (($#)); do
  case $1 in
    --version) version=${2:?--version needs a value}; shift 2 ;;
    --targets) read -r -a targets <<<"${2?--targets needs a list}"; shift 2 ;;
    --standins) standins=1; shift ;;
    --no-cache) no_cache=(--no-cache); shift ;;
    --rebuild-base) rebuild_base=1; shift ;;
    --containers-conf) conf_only=${2:?usage: scripts/images.sh --containers-conf FILE}; shift 2 ;;
    -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ -n $version ]] || die "no version: pass --version (CMakeLists.txt has no project VERSION)"
prefix=${H3PIPE_IMAGE_PREFIX:-h3pipe}
mirror=${H3PIPE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${H3PIPE_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}
base=${H3PIPE_DEBIAN_IMAGE:-localhost/h3pipe-base/debian:12}
slim=${H3PIPE_DEBIAN_SLIM_IMAGE:-localhost/h3pipe-base/debian:12-slim}

# write_containers_conf FILE: podman settings for machines where its defaults cannot start a
# container (both hold on the development machine, a VM sandbox):
#  - no CAP_SYS_RESOURCE: podman's default RLIMIT_NOFILE (1048576) is above the hard limit and
#    crun/runc fail with "setrlimit RLIMIT_NOFILE: Operation not permitted"; the defaults become
#    the current hard limits (nproc at most podman's own default, 32768);
#  - cgroups v1 with a cgroup2 hierarchy that has controllers ("hybrid"): crun refuses it
#    ("cgroups in hybrid mode not supported"); runc (package runc) runs there.
# Used through CONTAINERS_CONF by this script and tests/deploy/deploy_container.py; elsewhere the
# file only restates podman's defaults.
write_containers_conf() {
  local out=$1 cap nofile nproc runtime=""
  cap=$(awk '/^CapEff:/ { print $2 }' /proc/self/status)
  nofile=$(ulimit -Hn) nproc=$(ulimit -Hu)
  [[ $nofile == unlimited ]] && nofile=1048576
  [[ $nproc == unlimited || $nproc -gt 32768 ]] && nproc=32768
  {
    echo "[containers]"
    if (( (16#${cap:-0} >> 24 & 1) == 0 )); then
      echo "default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=$nproc:$nproc\"]"
    fi
    if [[ ! -f /sys/fs/cgroup/cgroup.controllers && -n $(cat /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null) ]]; then
      command -v runc >/dev/null 2>&1 ||
        die "cgroups here are hybrid (v1 + a cgroup2 with controllers), which crun refuses: apt-get install runc"
      runtime=runc
    fi
    echo "[network]"
    # Pinned: podman 4.3 otherwise picks CNI where CNI networks already exist, and resolves
    # compose service names there only with the dnsname plugin; netavark has aardvark-dns.
    echo 'network_backend = "netavark"'
    echo "[engine]"
    if [[ -n $runtime ]]; then echo "runtime = \"$runtime\""; fi
  } >"$out"
}
if [[ -n $conf_only ]]; then
  write_containers_conf "$conf_only"
  exit 0
fi

command -v podman >/dev/null 2>&1 ||
  die "podman is not installed: apt-get install podman (Debian 12's podman 4.3 builds docker/Dockerfile)"
if [[ -z ${CONTAINERS_CONF:-} ]]; then
  export CONTAINERS_CONF=${TMPDIR:-/tmp}/h3pipe-containers.$(id -u).conf
  write_containers_conf "$CONTAINERS_CONF"
fi
podman info >/dev/null 2>&1 || die "podman cannot start: $(podman info 2>&1 | tail -n 1)"

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
t_all=$(now)

# --- 1. base images ------------------------------------------------------------------------------
make_base() {
  command -v debootstrap >/dev/null 2>&1 ||
    die "no base image $base and debootstrap is not installed: apt-get install debootstrap" \
        "(or set H3PIPE_DEBIAN_IMAGE/H3PIPE_DEBIAN_SLIM_IMAGE to images you have)"
  [[ $(id -u) -eq 0 ]] || die "debootstrap needs root to make $base (run as root, or set H3PIPE_DEBIAN_IMAGE)"
  local work root
  work=$(mktemp -d /var/tmp/h3pipe-base.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  root=$work/rootfs
  echo "images: debootstrap bookworm from $mirror (a few minutes, once)" >&2
  nice -n 19 debootstrap --variant=minbase bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -n 20 "$work/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
  # What Debian's own container images set: the three suites, no daemons started by package
  # installs, apt caches and translations left out, no host identity.
  rm -f "$root/etc/apt/sources.list"
  cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d" && chmod 0755 "$root/usr/sbin/policy-rc.d"
  cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";
EOF
  echo 'Acquire::Languages "none";' >"$root/etc/apt/apt.conf.d/docker-no-languages"
  chroot "$root" apt-get clean
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/log/*.log \
         "$root"/var/log/apt/* "$root"/tmp/* "$root"/root/.bash_history
  : >"$root/etc/machine-id"
  rm -f "$root/etc/hostname" "$root/etc/resolv.conf"
  mkdir -p "$cache_dir"
  tar --numeric-owner -C "$root" -c . >"$cache_dir/base-$base_key-full.tar.part"
  mv "$cache_dir/base-$base_key-full.tar.part" "$cache_dir/base-$base_key-full.tar"
  # Slim: what Debian's -slim images drop (docs but their copyright files, man, info, locales
  # but en/C), and the dpkg excludes that keep later installs from bringing them back.
  cat >"$root/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
  find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$root"/usr/share/man/* "$root"/usr/share/groff/* "$root"/usr/share/info/* \
         "$root"/usr/share/lintian/* "$root"/usr/share/linda/*
  find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
  tar --numeric-owner -C "$root" -c . >"$cache_dir/base-$base_key-slim.tar.part"
  mv "$cache_dir/base-$base_key-slim.tar.part" "$cache_dir/base-$base_key-slim.tar"
  rm -rf "$work"
  trap - EXIT
}

# The cache key of the base images: the suite, the mirrors and make_base itself.
cache_dir=${H3PIPE_CACHE:-/var/cache/h3pipe}
base_key=$({ echo "bookworm $mirror $security"; declare -f make_base; } | sha256sum | cut -c1-16)
import_base() {
  local changes=(--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
                 --change 'CMD ["bash"]' --change "LABEL h3pipe.base.key=$base_key")
  podman import -q "${changes[@]}" "$cache_dir/base-$base_key-full.tar" "$base" >/dev/null
  podman import -q "${changes[@]}" "$cache_dir/base-$base_key-slim.tar" "$slim" >/dev/null
}
has_key() {  # has_key IMAGE: the image exists and carries this base_key
  podman image inspect --format '{{json .Labels}}' "$1" 2>/dev/null | grep -q "\"h3pipe.base.key\":\"$base_key\""
}

t_base=$(now) base_made=false base_how=cached
if [[ -z ${H3PIPE_DEBIAN_IMAGE:-}${H3PIPE_DEBIAN_SLIM_IMAGE:-} ]]; then
  if ((rebuild_base)) || ! has_key "$base" || ! has_key "$slim"; then
    if ((rebuild_base)) || [[ ! -f $cache_dir/base-$base_key-full.tar || ! -f $cache_dir/base-$base_key-slim.tar ]]; then
      make_base
      base_how=debootstrap
    else
      base_how="imported from $cache_dir"
    fi
    import_base
    base_made=true
  fi
else
  for img in "$base" "$slim"; do
    podman image exists "$img" || podman pull "$img" >/dev/null ||
      die "base image $img is neither present nor pullable"
  done
fi
base_s=$(secs "$t_base" "$(now)")
echo "images: base $base, slim $slim (key $base_key, $base_how, ${base_s}s)" >&2

# --- 2. targets -------------------------------------------------------------------------------------
build_one() {  # build_one TARGET TAG FILE [extra podman build args]
  local target=$1 tag=$2 file=$3 log
  shift 3
  log=$(mktemp /tmp/h3pipe-image-build.XXXXXX)
  echo "images: building $tag" >&2
  # The whole log to a file; its STEP lines (and cache hits) as progress.
  # --format docker: podman's default OCI format has no HEALTHCHECK field and drops it (with
  # only a warning), so a container would have no health check at all.
  if ! nice -n 19 podman build --format docker --layers "${no_cache[@]}" -f "$file" --target "$target" \
         --build-arg DEBIAN_IMAGE="$base" --build-arg DEBIAN_SLIM_IMAGE="$slim" \
         "$@" -t "$tag" . 2>&1 | tee "$log" | awk '/STEP [0-9]+\// { print substr($0, 1, 110); fflush() }' >&2; then
    tail -n 30 "$log" >&2
    die "podman build --target $target failed (last lines above, full log $log)"
  fi
  rm -f "$log"
}

# The console (#38, docs/console.md) goes into the api image as static files: bundled here by
# esbuild (ui/build.mjs, from the packages ui/package-lock.json locks and setup.sh installs) into
# a folder of its own, given to the build as the named context "ui" (COPY --from=ui): no npm in
# the build stage, nothing fetched at run time, and the compile layer's context is unchanged.
ui_ctx=()
if [[ " ${targets[*]} " == *" api "* ]]; then
  command -v node >/dev/null 2>&1 && [[ -d ui/node_modules/esbuild ]] ||
    die "the api image carries the console: it needs node and ui/node_modules (scripts/setup.sh runs npm ci --prefix ui)"
  ui_out=$(mktemp -d /tmp/h3pipe-ui.XXXXXX)
  trap 'rm -rf "$ui_out"' EXIT
  node ui/build.mjs --out "$ui_out" >/dev/null || die "bundling the console (node ui/build.mjs) failed"
  ui_ctx=(--build-context "ui=$ui_out")
fi

declare -A wall size
built=()
for t in "${targets[@]}"; do
  grep -q "^FROM .* AS $t\$" docker/Dockerfile || die "docker/Dockerfile has no target '$t'"
  t0=$(now)
  build_one "$t" "$prefix/$t:$version" docker/Dockerfile --ignorefile docker/Dockerfile.dockerignore \
    "${ui_ctx[@]}"
  wall[$t]=$(secs "$t0" "$(now)")
  built+=("$prefix/$t:$version")
done
if ((standins)); then
  for t in redis prometheus; do
    t0=$(now)
    build_one "$t" "localhost/h3pipe-standin/$t:latest" tests/deploy/standins/Containerfile
    wall[standin-$t]=$(secs "$t0" "$(now)")
    built+=("localhost/h3pipe-standin/$t:latest")
  done
fi
total_s=$(secs "$t_all" "$(now)")

# --- 3. report --------------------------------------------------------------------------------------
printf '%-44s %10s %9s\n' image size_MB build_s
json="{\"version\":\"$version\",\"base_made\":$base_made,\"base_s\":$base_s,\"total_s\":$total_s,\"images\":{"
sep=""
for img in "${built[@]}"; do
  bytes=$(podman image inspect --format '{{.Size}}' "$img")
  name=${img##*/}; name=${name%%:*}
  [[ $img == *h3pipe-standin/* ]] && name=standin-$name
  mb=$(awk -v b="$bytes" 'BEGIN { printf "%.0f", b / 1e6 }')
  printf '%-44s %10s %9s\n' "$img" "$mb" "${wall[$name]}"
  json+="$sep\"$img\":{\"size_bytes\":$bytes,\"build_s\":${wall[$name]}}"
  sep=","
done
printf 'base images %ss; all builds and the base %ss (podman %s)\n' "$base_s" "$total_s" \
  "$(podman version --format '{{.Client.Version}}')"
echo "$json}}"
