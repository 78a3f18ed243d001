// The cluster config, declared once: every object's fields (config.h's structs), in the order
// docs/config.md lists them.  Wording of every message: common/core/field_table.h (kStrict).
#include "common/config/fields.h"

#include <limits>

#include "common/artifacts/artifacts.h"
#include "common/config/runtime_names.h"
#include "common/latent/profile_json.h"

// The tables name only the options they set ({.imin = 0, .imax = 65535}); every other member of
// Opts has its default.  GCC 12 still warns about the ones left out (GCC PR 96868).
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace h3pipe::config {
namespace {

using nlohmann::json;

std::vector<std::string> runtime_names() {
  return {kRuntimeNames.begin(), kRuntimeNames.end()};
}

// A stage's section of /stages: {"runtime": {...}}.
struct StageSection {
  RuntimeRef runtime;
};
struct StagesSection {
  std::optional<StageSection> encode, sample, decode;
};

const Table<Redis::Sentinel>& sentinel_table() {
  using S = Redis::Sentinel;
  static const Table<S> t{
      "/redis/sentinel",
      "Redis behind Sentinel (redis.embedded false): every process finds the primary through these "
      "(docs/foundation.md, \"Failover\"); redis.host and redis.port are then unused.",
      {field("addresses", &S::addresses, "HOST:PORT of each Sentinel",
             {.rule = "at least one, each HOST:PORT"}),
       field("master", &S::master, "the master name Sentinel monitors", {.required = true}),
       field("user", &S::user, "Sentinel's own AUTH user, if it has one"),
       field("password_file", &S::password_file, "file holding Sentinel's own password",
             {.path = true})},
      [](ObjectReader& r, S& s, const ReadContext& ctx) {
        if (s.addresses.empty())
          ctx.errors.add(r.path("addresses"), "expected at least one HOST:PORT");
        for (std::size_t i = 0; i < s.addresses.size(); ++i) {
          const auto& a = s.addresses[i];
          const auto colon = a.rfind(':');
          const int port = colon == std::string::npos ? 0 : std::atoi(a.c_str() + colon + 1);
          if (colon == std::string::npos || colon == 0 || port < 1 || port > 65535)
            ctx.errors.add(fmt::format("{}/{}", r.path("addresses"), i),
                           fmt::format("\"{}\": expected HOST:PORT", a));
        }
      },
      {"addresses: at least one, each HOST:PORT with a port in [1, 65535]"}};
  return t;
}

const Table<Redis>& redis_table() {
  static const Table<Redis> t{
      "/redis",
      "The Redis every service and the CLI use (docs/foundation.md).",
      {field("host", &Redis::host, "address of the Redis server"),
       field("port", &Redis::port,
             "its port; unused with embedded (that Redis is on its Unix socket only)",
             {.imin = 0, .imax = 65535}),
       field("user", &Redis::user, "ACL user; empty: the default user"),
       field("password_file", &Redis::password_file, "file holding the password; empty: none",
             {.path = true}),
       field("credentials_dir", &Redis::credentials_dir,
             "folder of `redis-<role>.password` files, one ACL user per service "
             "(configs/redis/users.acl)",
             {.path = true, .default_text = "embedded: <state_dir>/secrets, generated"}),
       field("embedded", &Redis::embedded, "h3pipe start runs a private redis-server"),
       field("managed", &Redis::managed,
             "embedded false: `h3pipe start` on the host whose name or address is /redis/host "
             "runs this shared Redis (AOF, the ACL users of credentials_dir, an stunnel TLS "
             "server on /redis/port); every other host reaches it through an stunnel client "
             "that checks its certificate (docs/deploy.md, \"Native shared Redis\")"),
       field("allow_plaintext", &Redis::allow_plaintext,
             "reach a Redis on another host without TLS (a trusted network only); preflight "
             "fails a plain cross-host Redis unless set"),
       field("wait_replicas", &Redis::wait_replicas,
             "submissions and stage completions WAIT for this many replicas (0: off)",
             {.imin = 0, .imax = 16}),
       field("wait_timeout_ms", &Redis::wait_timeout_ms, "at most this long",
             {.imin = 1, .imax = 600000}),
       object("sentinel", &Redis::sentinel, &sentinel_table, "Redis behind Sentinel")},
      [](ObjectReader& r, Redis& s, const ReadContext& ctx) {
        if (r.has("sentinel") && s.embedded)
          ctx.errors.add(
              r.path("sentinel"),
              "a Redis behind Sentinel is not the embedded one: set /redis/embedded to false");
        if (s.managed && s.embedded)
          ctx.errors.add(r.path("managed"),
                         "a managed shared Redis is not the embedded one: set /redis/embedded to "
                         "false");
        if (s.managed && r.has("sentinel"))
          ctx.errors.add(r.path("managed"), "h3pipe does not run a Redis behind Sentinel");
        if (s.managed && s.credentials_dir.empty())
          ctx.errors.add(r.path("credentials_dir"),
                         "required with /redis/managed: the folder `h3pipe credentials init` "
                         "writes (or `credentials export` copies to this host)");
        if (s.managed && s.port == 0)
          ctx.errors.add(r.path("port"),
                         "required with /redis/managed: the port other hosts reach Redis on");
      },
      {"sentinel requires embedded false",
       "managed requires embedded false, no sentinel, credentials_dir and a port"}};
  return t;
}

const Table<Queue>& queue_table() {
  static const Table<Queue> t{
      "/queue",
      "Leased work on the stage streams (docs/design.md, rule 3).",
      {field("lease_ms", &Queue::lease_ms,
             "a claimed task is reclaimable after this without renewal",
             {.imin = 100, .imax = 3600000}),
       field("renew_ms", &Queue::renew_ms, "lease renewal period", {.imin = 10, .imax = 600000}),
       field("sweep_ms", &Queue::sweep_ms, "how often idle workers look for expired leases",
             {.imin = 10, .imax = 600000}),
       field("max_deliveries", &Queue::max_deliveries,
             "deliveries of a task before it is dead-lettered", {.imin = 1, .imax = 1000}),
       field("block_ms", &Queue::block_ms, "XREADGROUP BLOCK", {.imin = 1, .imax = 60000}),
       field("retry_backoff_ms", &Queue::retry_backoff_ms,
             "minimum idle before a failed task is retried", {.imin = 0, .imax = 3600000}),
       field("aging_ms", &Queue::aging_ms,
             "a waiting task's priority rises by one per aging_ms on its stream, up to the "
             "highest waiting (docs/design.md, \"The claim order\"); 0: no aging",
             {.imin = 0, .imax = 86400000})},
      [](ObjectReader& r, Queue& q, const ReadContext& ctx) {
        if (q.renew_ms * 2 > q.lease_ms)
          ctx.errors.add(r.path("renew_ms"),
                         fmt::format("{} must be at most half of lease_ms ({}) so one missed "
                                     "renewal does not lose the lease",
                                     q.renew_ms, q.lease_ms));
      },
      {"renew_ms at most half of lease_ms"}};
  return t;
}

const Table<User>& user_table() {
  static const Table<User> t{
      "/users/*",
      "A user of a shared fleet (docs/design.md, \"The claim order\").",
      {field("weight", &User::weight,
             "its share of pool-seconds against the other users with work queued (a user not "
             "named has 1)",
             {.dmin = 0.001, .dmax = 1000}),
       field("max_jobs", &User::max_jobs,
             "quota: the most jobs it may have submitted and not finished; a submission that "
             "would pass it is refused whole, or held (over_quota) (0: none)",
             {.imin = 0, .imax = 100000000}),
       field("over_quota", &User::over_quota,
             "past max_jobs: refuse (the batch is refused whole, exit 2) or hold (accepted; a job "
             "past the quota is queued but not claimable until the user is back under it; "
             "docs/design.md, \"The claim order\")",
             {.choices = {"refuse", "hold"}})}};
  return t;
}

const Table<Limits>& limits_table() {
  static const Table<Limits> t{
      "/limits",
      "What a job spec may ask for (checked at submission).",
      {field("max_width", &Limits::max_width, "largest width", {.imin = 16, .imax = 16384}),
       field("max_height", &Limits::max_height, "largest height", {.imin = 16, .imax = 16384}),
       field("max_frames", &Limits::max_frames, "most frames", {.imin = 1, .imax = 100000}),
       field("max_steps", &Limits::max_steps, "most sampling steps", {.imin = 1, .imax = 10000}),
       field("max_fps", &Limits::max_fps, "highest fps", {.imin = 1, .imax = 1000}),
       field("max_latent_bytes", &Limits::max_latent_bytes, "largest latent file",
             {.imin = 1, .imax = std::numeric_limits<long long>::max()}),
       field("max_batch", &Limits::max_batch, "most jobs in one submission",
             {.imin = 1, .imax = 10000000}),
       field("max_prompt_bytes", &Limits::max_prompt_bytes,
             "longest prompt, negativePrompt and params value", {.imin = 1, .imax = 1 << 24}),
       field("max_params", &Limits::max_params,
             "most entries of a spec's params map (keys <= 128 bytes)", {.imin = 0, .imax = 4096}),
       custom<Limits>(
           [] {
             FieldInfo f;
             f.key = "input_roots";
             f.type = FieldType::kArray;
             f.item = FieldType::kPath;
             f.path = true;
             f.description = "folders a job's referenceImage may be read from; [] allows none";
             f.default_text = "[<state_dir>/inputs]";
             f.rule = "no empty path";
             return f;
           }(),
           [](ObjectReader& r, const FieldInfo& f, Limits& l, const ReadContext& ctx) {
             std::vector<std::string> roots;
             FieldInfo strings = f;
             strings.type = FieldType::kStrings;
             if (!r.has(f.key)) return true;
             detail::read_value(r, strings, ctx, roots);
             for (std::size_t i = 0; i < roots.size(); ++i) {
               if (roots[i].empty())
                 ctx.errors.add(fmt::format("{}/{}", r.path(f.key), i), "an empty path");
               l.input_roots.push_back(resolve_path(ctx.base_dir, roots[i]));
             }
             return true;
           })}};
  return t;
}

const Table<Transfer>& transfer_table() {
  static const Table<Transfer> t{
      "/transfer",
      "Latents host to host (docs/transfer.md).",
      {field("curve", &Transfer::curve,
             "CURVE encryption and ZAP between hosts (ignored on one host)"),
       field("chunk_bytes", &Transfer::chunk_bytes, "chunk size", {.imin = 4096, .imax = 64 << 20}),
       field("window", &Transfer::window, "chunks in flight", {.imin = 1, .imax = 1024}),
       field("heartbeat_ms", &Transfer::heartbeat_ms, "heartbeat period",
             {.imin = 10, .imax = 60000}),
       field("dead_after_ms", &Transfer::dead_after_ms, "a peer silent this long is gone",
             {.imin = 50, .imax = 600000}),
       field("max_attempts", &Transfer::max_attempts, "sends of one latent before giving up",
             {.imin = 1, .imax = 100})}};
  return t;
}

const Table<StageSection>& stage_section_table() {
  static const Table<StageSection> t{"/stages/*",
                                     "One stage's defaults.",
                                     {object("runtime", &StageSection::runtime, &runtime_table,
                                             "the runtime of the stage's pools")}};
  return t;
}

const Table<StagesSection>& stages_table() {
  static const Table<StagesSection> t{
      "/stages",
      "The default runtime of each stage; a pool's own runtime overrides it.",
      {object("encode", &StagesSection::encode, &stage_section_table, "the encode stage"),
       object("sample", &StagesSection::sample, &stage_section_table, "the sample stage"),
       object("decode", &StagesSection::decode, &stage_section_table, "the decode stage")}};
  return t;
}

const Table<JobClass>& class_table() {
  static const Table<JobClass> t{
      "/classes/*",
      "A job class: the size a profile applies to (a job's named class, else the one matching "
      "width/height/frames and steps when not 0, else \"default\").",
      {field("name", &JobClass::name, "the class name", {.required = true, .nonempty = true}),
       field("width", &JobClass::width, "width", {.imin = 0, .imax = 16384}),
       field("height", &JobClass::height, "height", {.imin = 0, .imax = 16384}),
       field("frames", &JobClass::frames, "frames", {.imin = 0, .imax = 100000}),
       field("steps", &JobClass::steps, "steps; 0 matches any", {.imin = 0, .imax = 10000}),
       field("latent_profile", &JobClass::latent_profile,
             "its latent profile; empty: the cluster's", {.rule = "a known latent profile"})}};
  return t;
}

const Table<Host>& host_table() {
  static const Table<Host> t{
      "/hosts/*",
      "A machine of the cluster.",
      {field("name", &Host::name, "the host name",
             {.required = true, .nonempty = true, .rule = "an id (docs/security.md), unique"}),
       field("address", &Host::address, "where peers reach it"),
       field("ssh", &Host::ssh, "SSH alias for start --all"),
       field("bind", &Host::bind, "interface its services listen on"),
       field("transfer_port", &Host::transfer_port,
             "its transfer receiver's port; 0: a free one (local mode only)",
             {.imin = 0, .imax = 65535}),
       field("transfer_data_port", &Host::transfer_data_port,
             "its transfer receiver's data port (AES-256-GCM data frames, docs/transfer.md); 0: "
             "transfer_port + 1 when transfer_port is set, else a free one",
             {.imin = 0, .imax = 65535}),
       field("transfer_metrics_port", &Host::transfer_metrics_port,
             "its transfer service's Prometheus port; 0: a free one, kept across restarts",
             {.imin = 0, .imax = 65535, .rule = "unique per host"}),
       field("transfer_public_key_file", &Host::transfer_public_key_file,
             "CURVE public key of its receiver", {.path = true}),
       field("transfer_secret_key_file", &Host::transfer_secret_key_file,
             "CURVE secret key of its receiver", {.path = true}),
       field("transfer_allowed_clients", &Host::transfer_allowed_clients,
             "Z85 public keys admitted by ZAP"),
       field("api_bind", &Host::api_bind,
             "interface its h3pipe-api listens on (docs/api.md); 0.0.0.0 only behind TLS (a "
             "proxy, or api_tls_cert and api_tls_key)",
             {.nonempty = true}),
       field("api_port", &Host::api_port, "its h3pipe-api's port; 0: a free one",
             {.imin = 0, .imax = 65535}),
       field("api_metrics_port", &Host::api_metrics_port,
             "its h3pipe-api's Prometheus port; 0: a free one",
             {.imin = 0, .imax = 65535, .rule = "unique per host"}),
       field("api_tls_cert", &Host::api_tls_cert,
             "PEM certificate chain its h3pipe-api serves HTTPS with (`h3pipe start` passes "
             "--tls-cert and probes /readyz over HTTPS, trusting this file); \"\": plain HTTP",
             {.path = true, .rule = "with api_tls_key"}),
       field("api_tls_key", &Host::api_tls_key,
             "the private key of api_tls_cert; mode 0600 or 0400, else `start` refuses it",
             {.path = true, .rule = "with api_tls_cert"})}};
  return t;
}

const Table<Pool>& pool_table() {
  static const Table<Pool> t{
      "/pools/*",
      "A pool: one worker process bound to a group of GPUs on one host, running one stage.",
      {field("name", &Pool::name, "the pool name",
             {.required = true, .nonempty = true, .rule = "an id, unique"}),
       field("host", &Pool::host, "its host",
             {.required = true, .nonempty = true, .rule = "a host in /hosts"}),
       custom<Pool>(
           detail::info(
               "stage", FieldType::kString, "the stage it runs",
               {.required = true, .nonempty = true, .choices = {"encode", "sample", "decode"}}),
           [](ObjectReader& r, const FieldInfo& f, Pool& p, const ReadContext& ctx) {
             std::string s;
             if (detail::read_value(r, f, ctx, s))
               for (auto k : {StageKind::kEncode, StageKind::kSample, StageKind::kDecode})
                 if (s == stage_name(k)) p.stage = k;
             return true;
           }),
       field("gpus", &Pool::gpus, "device ids (CUDA_VISIBLE_DEVICES)"),
       field("gpu_model", &Pool::gpu_model,
             "the GPUs' model in configs/gpus.json (a name or alias): config-adapt, plan, and "
             "the MFU peak of report and h3pipe_pool_mfu (live: the name NVML gives the device "
             "first)"),
       field("shares_gpus_with", &Pool::shares_gpus_with,
             "another pool on the same GPUs (encoder + sampler)", {.rule = "a pool in /pools"}),
       field("metrics_port", &Pool::metrics_port, "0: pick a free port and report it",
             {.imin = 0, .imax = 65535, .rule = "unique per host"}),
       object("runtime", &Pool::runtime, &runtime_table, "overrides `/stages/<stage>/runtime`"),
       map("profiles", &Pool::profiles, &profile_table, "job class -> stage time on this pool",
           "expected an object mapping job class -> profile")}};
  return t;
}

const Table<Link>& link_table() {
  static const Table<Link> t{
      "/links/*",
      "A network link between two hosts (for plan).",
      {field("from", &Link::from, "a host",
             {.required = true, .nonempty = true, .rule = "a host in /hosts"}),
       field("to", &Link::to, "a host",
             {.required = true, .nonempty = true, .rule = "a host in /hosts"}),
       field("gbps", &Link::gbps, "bandwidth", {.dmin = 1e-6, .dmax = 1e6}),
       field("latency_ms", &Link::latency_ms, "latency", {.dmin = 0, .dmax = 1e6})}};
  return t;
}

bool read_latent_profiles(ObjectReader& r, const FieldInfo& f, Cluster& c, const ReadContext& ctx) {
  const auto* v = r.raw(f.key);
  if (!v) return true;
  if (!v->is_object()) {
    ctx.errors.add(r.path(f.key), "expected an object mapping profile name -> profile");
    return true;
  }
  for (auto it = v->begin(); it != v->end(); ++it) {
    const std::string p = r.path(f.key) + "/" + it.key();
    if (auto s = artifacts::validate_id(p, it.key()); !s.ok())
      ctx.errors.add(p, s.error().message);
    else if (latent::find_builtin_profile(it.key()))
      ctx.errors.add(
          p,
          fmt::format("\"{}\" is a built-in profile; declare yours under another name", it.key()));
    latent::LatentProfile lp;
    lp.name = it.key();
    latent::read_profile(it.value(), p, lp, ctx.errors);  // the built-in table's own reader
    c.latent_profiles[it.key()] = lp;
  }
  return true;
}

bool read_stages(ObjectReader& r, const FieldInfo& f, Cluster& c, const ReadContext& ctx) {
  const auto* v = r.raw(f.key);
  if (!v) return true;
  StagesSection s;
  read_table(*v, r.path(f.key), stages_table(), s, ctx);
  const std::pair<StageKind, std::optional<StageSection>*> each[] = {
      {StageKind::kEncode, &s.encode},
      {StageKind::kSample, &s.sample},
      {StageKind::kDecode, &s.decode}};
  for (const auto& [kind, sec] : each)
    if (*sec) c.stage_runtimes[kind] = (*sec)->runtime;
  return true;
}

}  // namespace

const Table<RuntimeRef>& runtime_table() {
  static const Table<RuntimeRef> t{
      "runtime",
      "Which runtime computes a stage (docs/runtimes.md), and its settings, which that runtime "
      "checks.",
      {field("name", &RuntimeRef::name, "the runtime",
             {.required = true, .nonempty = true, .choices = runtime_names(), .noun = "runtime"}),
       custom<RuntimeRef>(
           detail::info("settings", FieldType::kObject,
                        "the runtime's own settings (docs/runtimes.md)", {}),
           [](ObjectReader& r, const FieldInfo& f, RuntimeRef& rt, const ReadContext& ctx) {
             if (const auto* s = r.raw(f.key)) {
               if (!s->is_object())
                 ctx.errors.add(r.path(f.key), "expected an object");
               else
                 rt.settings = *s;
             }
             return true;
           },
           [](const RuntimeRef& rt) { return rt.settings; })}};
  return t;
}

const Table<Profile>& profile_table() {
  using K = Profile::Kind;
  const auto kind_is = [](K k) { return [k](const Profile& p) { return p.kind == k; }; };
  static const Table<Profile> t{
      "profile",
      "Stage time for one job of a class on one pool (the sim runtime, plan, dispatch).",
      {custom<Profile>(
           detail::info("kind", FieldType::kString, "the distribution",
                        {.choices = {"fixed", "normal", "cycle"}, .noun = "profile kind"}),
           [](ObjectReader& r, const FieldInfo& f, Profile& p, const ReadContext& ctx) {
             std::string kind;
             if (!detail::read_value(r, f, ctx, kind))
               return true;  // absent or not a string: fixed
             if (kind == "normal")
               p.kind = K::kNormal;
             else if (kind == "cycle")
               p.kind = K::kCycle;
             else if (kind != "fixed")
               return false;  // its fields are unknown: read none
             return true;
           },
           [](const Profile&) { return json("fixed"); }),
       only_when(field("seconds", &Profile::seconds, "the seconds",
                       {.required = true, .dmin = 0, .dmax = 1e7}),
                 "kind is fixed", kind_is(K::kFixed)),
       only_when(field("mean", &Profile::mean, "mean seconds",
                       {.required = true, .dmin = 0, .dmax = 1e7}),
                 "kind is normal", kind_is(K::kNormal)),
       only_when(field("sd", &Profile::sd, "standard deviation (samples clamped at >= 0)",
                       {.dmin = 0, .dmax = 1e7}),
                 "kind is normal", kind_is(K::kNormal)),
       only_when(custom<Profile>(
                     [] {
                       FieldInfo f =
                           detail::info("seconds", FieldType::kArray, "values used in turn",
                                        {.required = true, .dmin = 0, .rule = "not empty"});
                       f.item = FieldType::kNumber;
                       return f;
                     }(),
                     [](ObjectReader& r, const FieldInfo& f, Profile& p, const ReadContext& ctx) {
                       const auto* v = detail::value_of(r, f, ctx);
                       if (!v) return true;
                       if (!v->is_array() || v->empty()) {
                         ctx.errors.add(r.path(f.key), "expected a non-empty array of numbers");
                         return true;
                       }
                       for (std::size_t i = 0; i < v->size(); ++i) {
                         const auto& x = (*v)[i];
                         if (!x.is_number() || x.get<double>() < 0)
                           ctx.errors.add(fmt::format("{}/{}", r.path(f.key), i),
                                          "expected a number >= 0");
                         else
                           p.cycle.push_back(x.get<double>());
                       }
                       return true;
                     }),
                 "kind is cycle", kind_is(K::kCycle))}};
  return t;
}

const Table<Cluster>& cluster_table() {
  static const Table<Cluster> t{
      "",
      "The cluster config file: one JSON object (docs/design.md).",
      {field("name", &Cluster::name, "the cluster's name"),
       field("state_dir", &Cluster::state_dir, "logs, pids, Redis data of h3pipe start",
             {.path = true, .default_text = "$H3PIPE_STATE, else ./.state (made absolute)"}),
       field("artifact_root", &Cluster::artifact_root,
             "conditioning and latents: `<root>/<run>/<job>/...`",
             {.path = true, .default_text = "<state_dir>/artifacts"}),
       field("output_root", &Cluster::output_root, "`<root>/<run>/<job>.mp4` and `.pipeline.json`",
             {.path = true, .default_text = "<state_dir>/outputs"}),
       custom<Cluster>(
           detail::info("dispatch", FieldType::kString, "the dispatch policy (docs/planner.md)",
                        {.choices = {"completion_time", "first_free"}}),
           [](ObjectReader& r, const FieldInfo& f, Cluster& c, const ReadContext& ctx) {
             // The one place the name is parsed; read_value has refused any other name.
             if (std::string s; detail::read_value(r, f, ctx, s))
               c.dispatch = parse_policy(s).value_or(c.dispatch);
             return true;
           },
           [](const Cluster& c) { return json(policy_name(c.dispatch)); }),
       field("time_scale", &Cluster::time_scale,
             "multiplies every sim profile (rehearsal at 1/100)", {.dmin = 1e-6, .dmax = 1e6}),
       custom<Cluster>(
           detail::info("latent_profiles", FieldType::kMap,
                        "latent profiles declared beside the built-in ones (docs/latent.md, "
                        "\"Latent profiles\")",
                        {.rule = "a name that is an id and not a built-in profile's"}),
           &read_latent_profiles),
       field("latent_profile", &Cluster::latent_profile, "the default latent profile",
             {.rule = "a built-in or declared latent profile"}),
       object("redis", &Cluster::redis, &redis_table, "the Redis server"),
       object("queue", &Cluster::queue, &queue_table, "leases and retries"),
       object("limits", &Cluster::limits, &limits_table, "job spec limits"),
       object("transfer", &Cluster::transfer, &transfer_table, "host-to-host latent transfer"),
       map("users", &Cluster::users, &user_table,
           "users of a shared fleet by name ([A-Za-z0-9._@-]{1,64}): their fair-share weights",
           "expected an object mapping a user's name -> {\"weight\": N}"),
       [] {
         auto f = custom<Cluster>(
             detail::info("stages", FieldType::kObject, "default runtime per stage", {}),
             &read_stages);
         f.info.sub = [] { return describe(stages_table()); };
         return f;
       }(),
       array("classes", &Cluster::classes, &class_table, "job classes"),
       array("hosts", &Cluster::hosts, &host_table, "the machines"),
       array("pools", &Cluster::pools, &pool_table, "the worker pools"),
       array("links", &Cluster::links, &link_table, "network links (for plan)")}};
  return t;
}

}  // namespace h3pipe::config
