#include "deploy/operator/reconciler.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/jobspec/jobspec.h"

namespace loom::deploy::operator_ {
namespace {

std::string Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string Rfc3339(absl::Time t) { return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone()); }

absl::Time ParseTime(const Json& v, absl::Time fallback) {
  if (!v.is_string()) return fallback;
  absl::Time t;
  std::string err;
  if (!absl::ParseTime("%Y-%m-%dT%H:%M:%SZ", v.get<std::string>(), &t, &err)) return fallback;
  return t;
}

std::string RandomToken() {
  std::ifstream f("/dev/urandom", std::ios::binary);
  std::string raw(32, '\0');
  f.read(&raw[0], raw.size());
  return absl::BytesToHexString(raw);
}

const Json& At(const Json& j, const char* k) {
  static const Json kNull;
  return j.is_object() && j.contains(k) ? j[k] : kNull;
}

int IntAt(const Json& j, const char* k, int def) {
  const Json& v = At(j, k);
  return v.is_number_integer() ? v.get<int>() : def;
}

Json Labels(const std::string& job, const std::string& role) {
  return {
      {kJobLabel, job}, {kRoleLabel, role}, {"app.kubernetes.io/name", "loom"}, {"app.kubernetes.io/part-of", "loom"}};
}

Json Meta(const Json& job, const std::string& name, const std::string& role) {
  const Json& md = job["metadata"];
  return {{"name", name},
          {"namespace", md.value("namespace", "")},
          {"labels", Labels(md["name"], role)},
          {"ownerReferences",
           {{{"apiVersion", "loom.dev/v1"},
             {"kind", "TrainingJob"},
             {"name", md["name"]},
             {"uid", md.value("uid", "")},
             {"controller", true},
             {"blockOwnerDeletion", true}}}}};
}

// Stamps the spec hash (over everything but the hash itself).
Json Stamp(Json obj) {
  obj["metadata"]["annotations"][kHashAnnotation] = Fnv1a(obj.dump());
  return obj;
}

std::string HashOf(const Json& obj) {
  const Json& a = At(At(obj, "metadata"), "annotations");
  return a.is_object() ? a.value(kHashAnnotation, "") : "";
}

bool OwnedBy(const Json& obj, const std::string& uid) {
  for (const Json& r : At(At(obj, "metadata"), "ownerReferences"))
    if (r.value("uid", "") == uid) return true;
  return false;
}

int GpusOf(const Json& spec) {
  for (const char* which : {"limits", "requests"}) {
    const Json& v = At(At(At(spec, "resources"), which), "nvidia.com/gpu");
    int n = 0;
    if (v.is_number_integer()) return v.get<int>();
    if (v.is_string() && absl::SimpleAtoi(v.get<std::string>(), &n)) return n;
  }
  return 0;
}

}  // namespace

absl::Status CheckPodGpus(const Json& spec, const v1::JobSpec& job, int max_gpus_per_node) {
  if (job.device() != "cuda") return absl::OkStatus();
  const int64_t dp = std::max(1, job.parallel().dp()), tp = std::max(1, job.parallel().tp());
  const int64_t nodes = std::max(1, IntAt(spec, "numNodes", 1)), per_gpu = std::max(1, job.resources().ranks_per_gpu());
  const int64_t per_pod = (dp * tp + nodes - 1) / nodes, need = (per_pod + per_gpu - 1) / per_gpu;
  const int gpus = GpusOf(spec);
  const std::string layout = absl::StrCat("dp ", dp, " x tp ", tp, " ranks over numNodes ", nodes, " agent pod(s) put ",
                                          per_pod, " on each, ", per_gpu, " per GPU (resources.ranks_per_gpu)");
  if (gpus < need)
    return absl::InvalidArgumentError(absl::StrCat("parallel.tp: ", layout, ": each pod needs ", need,
                                                   " GPUs, but spec.resources asks for nvidia.com/gpu: ", gpus));
  if (max_gpus_per_node > 0 && gpus > max_gpus_per_node)
    return absl::InvalidArgumentError(absl::StrCat("parallel.tp: ", layout, ": each pod asks for nvidia.com/gpu: ", gpus,
                                                   ", more than any node offers (", max_gpus_per_node,
                                                   ", loom_operator --max-gpus-per-node)"));
  return absl::OkStatus();
}

namespace {

void SetCondition(Json& status, const std::string& type, bool value, const std::string& reason,
                  const std::string& message, int64_t generation, absl::Time now) {
  Json& conds = status["conditions"];
  if (!conds.is_array()) conds = Json::array();
  std::string s = value ? "True" : "False";
  for (Json& c : conds) {
    if (c.value("type", "") != type) continue;
    if (c.value("status", "") != s) c["lastTransitionTime"] = Rfc3339(now);
    c["status"] = s;
    c["reason"] = reason;
    c["message"] = message;
    c["observedGeneration"] = generation;
    return;
  }
  if (!value) return;  // absent means False
  conds.push_back({{"type", type},
                   {"status", s},
                   {"reason", reason},
                   {"message", message},
                   {"observedGeneration", generation},
                   {"lastTransitionTime", Rfc3339(now)}});
}

// Sets status.state and makes the matching condition the only True one among
// the phase conditions (Created stays True once set).
void SetState(Json& status, const std::string& state, const std::string& reason, const std::string& message,
              int64_t gen, absl::Time now) {
  status["state"] = state;
  for (const char* t : {"Running", "Restarting", "Succeeded", "Failed", "Suspended"})
    if (state != t) SetCondition(status, t, false, reason, message, gen, now);
  SetCondition(status, state, true, reason, message, gen, now);
}

bool Terminal(const Json& status) {
  std::string s = status.value("state", "");
  return s == "Succeeded" || s == "Failed";
}

// The coordinator token from the job's Secret; nullopt when the Secret cannot
// be read or holds no base64 token.
std::optional<std::string> ReadToken(KubeApi* api, const std::string& ns, const std::string& name) {
  auto sec = api->Get(kSecrets, ns, name + "-token");
  if (!sec.ok()) return std::nullopt;
  std::string tok;
  const Json& d = At(At(*sec, "data"), "token");
  if (!d.is_string() || !absl::Base64Unescape(d.get<std::string>(), &tok)) return std::nullopt;
  return tok;
}

std::string AgentName(const std::string& job, int i) { return absl::StrCat(job, "-agent-", i); }

bool BoolAt(const Json& j, const char* k) {
  const Json& v = At(j, k);
  return v.is_boolean() && v.get<bool>();
}

// The coordinator's user token (`token`: JobService, the operator's own
// client) and its agents' join token (`join-token`: NodeService registration);
// the reconciler fills in both when it creates the Secret.
Json TokenSecret(const Json& job, const std::string& secret) {
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata", Meta(job, secret, "token")},
          {"type", "Opaque"},
          {"data", {{"token", ""}, {"join-token", ""}}}};
}

Json CoordinatorService(const Json& job, const std::string& svc, const Json& coord_labels) {
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", Meta(job, svc, "coordinator")},
          {"spec",
           {{"selector", coord_labels},
            {"ports",
             {{{"name", "grpc"}, {"port", 7070}, {"targetPort", 7070}},
              {{"name", "metrics"}, {"port", 7071}, {"targetPort", 7071}}}}}}};
}

// One `loom coordinator` replica (none when suspended), with both tokens of the
// Secret mounted and, with spec.tls.secretName, TLS on its gRPC port.
Json CoordinatorDeployment(const Json& job, const std::string& svc, const std::string& secret,
                           const std::string& image, const Json& coord_labels, bool suspended) {
  const Json& spec = job["spec"];
  Json coord_container = {
      {"name", "coordinator"},
      {"image", image},
      {"command",
       // One coordinator per TrainingJob, which only the operator submits to:
       // the job's own paths (volumes of its agent pods) are not confined.
       {"loom", "coordinator", "--listen", "0.0.0.0:7070", "--metrics-listen", "0.0.0.0:7071", "--data-dir",
        "/var/lib/loom", "--allowed-roots", "/"}},
      {"ports", {{{"name", "grpc"}, {"containerPort", 7070}}, {{"name", "metrics"}, {"containerPort", 7071}}}},
      {"volumeMounts",
       {{{"name", "data"}, {"mountPath", "/var/lib/loom"}},
        {{"name", "token"}, {"mountPath", "/var/lib/loom/token"}, {"subPath", "token"}},
        {{"name", "token"}, {"mountPath", "/var/lib/loom/join-token"}, {"subPath", "join-token"}}}}};
  Json coord_volumes = {{{"name", "data"}, {"emptyDir", Json::object()}},
                        {{"name", "token"}, {"secret", {{"secretName", secret}, {"defaultMode", 0400}}}}};
  const std::string tls =
      At(At(spec, "tls"), "secretName").is_string() ? spec["tls"]["secretName"].get<std::string>() : "";
  if (!tls.empty()) {
    coord_container["command"].insert(coord_container["command"].end(),
                                      {"--tls-cert", "/etc/loom/tls/tls.crt", "--tls-key", "/etc/loom/tls/tls.key"});
    coord_container["volumeMounts"].push_back({{"name", "tls"}, {"mountPath", "/etc/loom/tls"}, {"readOnly", true}});
    coord_volumes.push_back({{"name", "tls"}, {"secret", {{"secretName", tls}}}});
  }
  return {{"apiVersion", "apps/v1"},
          {"kind", "Deployment"},
          {"metadata", Meta(job, svc, "coordinator")},
          {"spec",
           {{"replicas", suspended ? 0 : 1},
            {"strategy", {{"type", "Recreate"}}},
            {"selector", {{"matchLabels", coord_labels}}},
            {"template",
             {{"metadata", {{"labels", coord_labels}}},
              {"spec", {{"containers", {coord_container}}, {"volumes", coord_volumes}}}}}}}};
}

Json PodGroup(const Json& job, const std::string& name, int nodes, const Json& gang) {
  return {{"apiVersion", "scheduling.x-k8s.io/v1alpha1"},
          {"kind", "PodGroup"},
          {"metadata", Meta(job, name, "podgroup")},
          {"spec", {{"minMember", nodes}, {"scheduleTimeoutSeconds", IntAt(gang, "timeoutSeconds", 600)}}}};
}

// Pod template overlay (spec.template): labels and annotations merged without
// replacing the operator's own, spec merged (JSON merge patch) except
// containers, whose first entry merges into the agent container with env and
// volumeMounts appended.
void ApplyPodOverlay(const Json& overlay, Json& meta, Json& podspec) {
  if (!overlay.is_object()) return;
  const Json& om = At(overlay, "metadata");
  for (const char* k : {"labels", "annotations"})
    if (At(om, k).is_object())
      for (auto& [key, v] : om[k].items())
        if (!meta[k].contains(key)) meta[k][key] = v;
  Json os = At(overlay, "spec");
  if (!os.is_object()) return;
  Json oc = os.contains("containers") && os["containers"].is_array() && !os["containers"].empty()
                ? os["containers"][0]
                : Json();
  os.erase("containers");
  podspec.merge_patch(os);
  if (!oc.is_object()) return;
  Json& c = podspec["containers"][0];
  for (const char* k : {"env", "volumeMounts"}) {
    if (At(oc, k).is_array()) {
      if (!c.contains(k)) c[k] = Json::array();
      for (const Json& e : oc[k]) c[k].push_back(e);
      oc.erase(k);
    }
  }
  oc.erase("name");
  c.merge_patch(oc);
}

// Agent pod `i`: `loom agent` dialling the coordinator's Service, with the
// scheduling fields and the pod template overlay applied.
Json AgentPod(const Json& job, int i, const std::string& image, const std::string& secret, bool pod_group) {
  const Json& spec = job["spec"];
  const std::string name = job["metadata"]["name"];
  const std::string address = absl::StrCat(name, "-coordinator.", job["metadata"].value("namespace", ""), ".svc:7070");
  const int nproc = IntAt(spec, "nprocPerNode", 1);
  const std::string pod = AgentName(name, i);
  // Agents get the join token only (never the user token).
  Json token_env = {{"name", "LOOM_JOIN_TOKEN"},
                    {"valueFrom", {{"secretKeyRef", {{"name", secret}, {"key", "join-token"}}}}}};
  Json container = {{"name", "agent"},
                    {"image", image},
                    {"command",
                     {"loom", "agent", "--coordinator", address, "--cpu-slots", std::to_string(nproc), "--gpus",
                      std::to_string(GpusOf(spec)), "--hostname", pod, "--data-dir",
                      "/var/lib/loom/agent"}},
                    {"env", {token_env, {{"name", "LOOM_NODE_RANK"}, {"value", std::to_string(i)}}}}};
  if (spec.contains("resources")) container["resources"] = spec["resources"];
  Json podspec = {{"restartPolicy", "Always"}, {"hostname", pod}, {"containers", {container}}};
  Json meta = Meta(job, pod, "agent");
  meta["labels"]["loom.dev/node-rank"] = std::to_string(i);
  if (pod_group) meta["labels"]["scheduling.x-k8s.io/pod-group"] = name;
  const Json& sched = At(spec, "scheduling");
  const Json& gang = At(sched, "gang");
  if (At(gang, "schedulerName").is_string()) podspec["schedulerName"] = gang["schedulerName"];
  if (At(sched, "priorityClassName").is_string()) podspec["priorityClassName"] = sched["priorityClassName"];
  if (At(sched, "queue").is_string()) meta["labels"]["loom.dev/queue"] = sched["queue"];
  ApplyPodOverlay(At(spec, "template"), meta, podspec);
  return {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", meta}, {"spec", podspec}};
}

}  // namespace

Reconciler::Reconciler(KubeApi* api, CoordinatorConnector connect, ReconcilerOptions opts)
    : api_(api), connect_(std::move(connect)), opts_(std::move(opts)) {}

Reconciler::~Reconciler() {
  for (auto& [key, w] : watchers_) *w.stop = true;
  for (auto& [key, w] : watchers_)
    if (w.thread.joinable()) w.thread.join();
}

void Reconciler::StopWatcher(const std::string& key) {
  auto it = watchers_.find(key);
  if (it == watchers_.end()) return;
  *it->second.stop = true;
  if (it->second.thread.joinable()) it->second.thread.join();
  watchers_.erase(it);
}

void Reconciler::EnsureWatcher(const std::string& ns, const std::string& name, const std::string& job_id,
                               const std::string& address, const std::string& token) {
  if (!opts_.on_job_event) return;
  const std::string key = ns + "/" + name;
  auto it = watchers_.find(key);
  if (it != watchers_.end() && it->second.job_id == job_id) return;
  StopWatcher(key);
  Watcher& w = watchers_[key];
  w.job_id = job_id;
  w.stop = std::make_unique<std::atomic<bool>>(false);
  const std::atomic<bool>* stop = w.stop.get();
  w.thread = std::thread([this, ns, name, job_id, address, token, stop] {
    // Re-open the stream after a failure (coordinator restart, network), with
    // a pause; an OK end means the job reached a terminal state.
    while (!*stop) {
      std::unique_ptr<CoordinatorClient> c = connect_(address, token);
      absl::Status s = c ? c->Watch(job_id, [&](const v1::JobStatus&) { opts_.on_job_event(ns, name); }, stop)
                         : absl::UnavailableError("unreachable");
      if (s.ok() || absl::IsUnimplemented(s) || absl::IsNotFound(s)) {
        opts_.on_job_event(ns, name);
        return;
      }
      for (int i = 0; i < 10 && !*stop; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
}

Json Reconciler::DesiredChildren(const Json& job, const ReconcilerOptions& opts) {
  const Json& spec = job["spec"];
  const std::string name = job["metadata"]["name"];
  const bool suspended = BoolAt(At(spec, "runPolicy"), "suspend");
  const std::string image = spec.value("image", opts.default_image);
  const std::string secret = name + "-token";
  const std::string svc = name + "-coordinator";
  const int nodes = IntAt(spec, "numNodes", 1);
  const Json& gang = At(At(spec, "scheduling"), "gang");
  const bool pod_group = BoolAt(gang, "podGroup");
  const Json coord_labels = Labels(name, "coordinator");
  Json out = Json::array();
  out.push_back(TokenSecret(job, secret));
  out.push_back(Stamp(CoordinatorService(job, svc, coord_labels)));
  out.push_back(Stamp(CoordinatorDeployment(job, svc, secret, image, coord_labels, suspended)));
  if (pod_group) out.push_back(Stamp(PodGroup(job, name, nodes, gang)));
  for (int i = 0; i < nodes; ++i) out.push_back(Stamp(AgentPod(job, i, image, secret, pod_group)));
  return out;
}

absl::StatusOr<bool> Reconciler::Ensure(const Resource& r, const std::string& ns, const Json& desired) {
  const std::string name = desired["metadata"]["name"];
  auto cur = api_->Get(r, ns, name);
  if (absl::IsNotFound(cur.status())) {
    auto created = api_->Create(r, ns, desired);
    if (absl::IsAlreadyExists(created.status())) return false;
    if (!created.ok()) return created.status();
    return true;
  }
  if (!cur.ok()) return cur.status();
  const std::string uid = desired["metadata"]["ownerReferences"][0].value("uid", "");
  if (!OwnedBy(*cur, uid))
    return absl::FailedPreconditionError(
        absl::StrCat(r.plural, " ", name, " exists and is not owned by this TrainingJob"));
  if (r.plural == "secrets" || HashOf(*cur) == HashOf(desired)) return true;
  if (r.plural == "pods") {  // pods are immutable: replace
    absl::Status s = api_->Delete(r, ns, name);
    if (!s.ok() && !absl::IsNotFound(s)) return s;
    return false;
  }
  Json next = desired;
  next["metadata"]["resourceVersion"] = (*cur)["metadata"]["resourceVersion"];
  if (r.plural == "services" && At(At(*cur, "spec"), "clusterIP").is_string())
    next["spec"]["clusterIP"] = (*cur)["spec"]["clusterIP"];
  auto upd = api_->Update(r, ns, next);
  if (!upd.ok()) return upd.status();
  return true;
}

absl::Status Reconciler::Finalize(const std::string& ns, Json job) {
  StopWatcher(ns + "/" + job["metadata"].value("name", std::string()));
  const std::string name = job["metadata"]["name"];
  const Json& status = At(job, "status");
  const std::string job_id = status.is_object() ? status.value("jobId", "") : "";
  if (!job_id.empty() && !Terminal(status)) {
    // Best effort: deleting the pods below kills the ranks anyway.
    std::optional<std::string> tok = ReadToken(api_, ns, name);
    std::unique_ptr<CoordinatorClient> c = tok ? connect_(CoordinatorAddress(ns, job), *tok) : nullptr;
    if (c) (void)c->Cancel(job_id);
  }
  auto pods = api_->List(kPods, ns, {absl::StrCat(kJobLabel, "=", name)});
  if (!pods.ok()) return pods.status();
  for (const Json& p : (*pods)["items"]) {
    absl::Status s = api_->Delete(kPods, ns, p["metadata"]["name"]);
    if (!s.ok() && !absl::IsNotFound(s)) return s;
  }
  for (const auto& [r, n] : std::vector<std::pair<Resource, std::string>>{{kDeployments, name + "-coordinator"},
                                                                          {kServices, name + "-coordinator"},
                                                                          {kSecrets, name + "-token"},
                                                                          {kPodGroups, name}}) {
    absl::Status s = api_->Delete(r, ns, n);
    if (!s.ok() && !absl::IsNotFound(s)) return s;
  }
  Json& fin = job["metadata"]["finalizers"];
  Json kept = Json::array();
  for (const Json& f : fin)
    if (f != kFinalizer) kept.push_back(f);
  fin = kept;
  auto upd = api_->Update(kTrainingJobs, ns, job);
  if (!upd.ok() && !absl::IsNotFound(upd.status())) return upd.status();
  return absl::OkStatus();
}

// The fields of one TrainingJob that a reconcile pass reads; `job`, `spec` and
// `run_policy` point into the job object the pass holds.
struct Reconciler::JobView {
  const std::string& ns;
  const std::string& name;
  std::string uid;
  const Json& job;
  const Json& spec;
  const Json& run_policy;
  int64_t gen;
  bool suspended;
  int nodes;
  absl::Time now;
};

// The job's agent pods by name, counted by phase (a pod without a phase is
// active) and by readiness.
struct Reconciler::AgentPods {
  std::map<std::string, Json> existing;
  int active = 0, ready = 0, failed = 0, succeeded = 0;
};

namespace {

bool HasFinalizer(const Json& job) {
  bool has = false;
  for (const Json& f : At(At(job, "metadata"), "finalizers")) has |= f == kFinalizer;
  return has;
}

std::string PhaseOf(const Json& pod, const char* absent) {
  const Json& phase = At(At(pod, "status"), "phase");
  return phase.is_string() ? phase.get<std::string>() : absent;
}

// Maps the Loom job's JobStatus onto status.state, its conditions and the
// progress fields (see the table in reconciler.h).
void ApplyJobStatus(const v1::JobStatus& j, const Json& spec, int64_t gen, absl::Time now, Json& status) {
  std::string msg = absl::StrCat("loom job ", j.job_id(), " ", v1::JobState_Name(j.state()));
  switch (j.state()) {
    case v1::RUNNING:
      SetState(status, "Running", "JobRunning", msg, gen, now);
      break;
    case v1::RESTARTING:
      SetState(status, "Restarting", "JobRestarting", msg, gen, now);
      break;
    case v1::SUCCEEDED:
      SetState(status, "Succeeded", "JobSucceeded", msg, gen, now);
      break;
    case v1::FAILED:
    case v1::CANCELLED:
      SetState(status, "Failed", j.state() == v1::FAILED ? "JobFailed" : "JobCancelled",
               j.root_cause().empty() ? msg : absl::StrCat(msg, ": ", j.root_cause()), gen, now);
      break;
    default:  // PENDING, SCHEDULED
      if (j.restart_count() > 0) {
        // Re-queued after a restart (e.g. a lost agent): still restarting.
        SetState(status, "Restarting", "JobRequeued", msg, gen, now);
      } else if (status.value("state", "") == "Suspended") {
        SetState(status, "Created", "Resumed", msg, gen, now);
      }
      break;
  }
  status["restartCount"] = j.restart_count();
  status["currentStep"] = j.current_step();
  status["lastCheckpointStep"] = j.last_checkpoint_step();
  status["rootCauseRank"] = j.root_cause_rank();
  status["rootCause"] = j.root_cause();
  int steps = IntAt(At(At(spec, "job"), "train"), "steps", 0);
  status["progress"] = absl::StrCat(j.current_step(), "/", steps);
  if (j.state() == v1::RUNNING && !status.contains("startTime")) status["startTime"] = Rfc3339(now);
}

// runPolicy.activeDeadlineSeconds, counted from the first Running: past it the
// Loom job is cancelled and the TrainingJob fails.
void EnforceDeadline(const Json& run_policy, CoordinatorClient& c, int64_t gen, absl::Time now, Json& status) {
  const int ads = IntAt(run_policy, "activeDeadlineSeconds", 0);
  if (ads > 0 && status.contains("startTime") && !Terminal(status) &&
      now - ParseTime(status["startTime"], now) > absl::Seconds(ads)) {
    if (!status.value("jobId", "").empty()) (void)c.Cancel(status["jobId"]);
    SetState(status, "Failed", "DeadlineExceeded", absl::StrCat("running longer than ", ads, "s"), gen, now);
  }
}

}  // namespace

absl::StatusOr<ReconcileResult> Reconciler::Reconcile(const std::string& ns, const std::string& name) {
  ReconcileResult result;
  const absl::Time now = opts_.now();
  auto got = api_->Get(kTrainingJobs, ns, name);
  if (absl::IsNotFound(got.status())) {
    result.gone = true;
    return result;
  }
  if (!got.ok()) return got.status();
  Json job = *got;
  if (job["metadata"].contains("deletionTimestamp")) {
    if (HasFinalizer(job)) {
      absl::Status s = Finalize(ns, job);
      if (!s.ok()) return s;
    }
    result.gone = true;
    return result;
  }
  if (!HasFinalizer(job)) {
    Json& md = job["metadata"];
    if (!md.contains("finalizers")) md["finalizers"] = Json::array();
    md["finalizers"].push_back(kFinalizer);
    auto upd = api_->Update(kTrainingJobs, ns, job);
    if (!upd.ok()) return upd.status();
    job = *upd;
  }
  const Json& spec = job["spec"];
  const Json& run_policy = At(spec, "runPolicy");
  const JobView v{ns,
                  name,
                  job["metadata"].value("uid", ""),
                  job,
                  spec,
                  run_policy,
                  job["metadata"].value("generation", 1),
                  BoolAt(run_policy, "suspend"),
                  IntAt(spec, "numNodes", 1),
                  now};
  Json status = job.contains("status") && job["status"].is_object() ? job["status"] : Json::object();
  const Json old_status = status;
  const bool terminal = Terminal(status);

  AgentPods pods;
  absl::Status s = EnsureChildren(v, terminal, pods, result);
  if (!s.ok()) return s;
  status["replicaStatuses"] = {
      {"active", pods.active}, {"ready", pods.ready}, {"failed", pods.failed}, {"succeeded", pods.succeeded}};
  SetCondition(status, "Created", true, "ChildrenCreated", "coordinator and agent pods created", v.gen, now);
  if (!status.contains("state")) status["state"] = "Created";
  if (!status.contains("attempt")) status["attempt"] = 0;

  s = SyncLoomJob(v, terminal, pods, status, result);
  if (!s.ok()) return s;
  if (Terminal(status) && !status.contains("completionTime")) status["completionTime"] = Rfc3339(now);
  status["observedGeneration"] = v.gen;

  if (status != old_status) {
    Json next = job;
    next["status"] = status;
    auto upd = api_->UpdateStatus(kTrainingJobs, ns, next);
    if (!upd.ok()) return upd.status();
  }
  s = ScheduleNextPass(v, status, result);
  if (!s.ok()) return s;
  return result;
}

absl::Status Reconciler::EnsureChildren(const JobView& v, bool terminal, AgentPods& pods, ReconcileResult& result) {
  Json children = DesiredChildren(v.job, opts_);
  for (const Json& c : children) {
    const std::string kind = c["kind"];
    if (kind == "Pod") continue;
    Json desired = c;
    Resource r = kind == "Secret"       ? kSecrets
                 : kind == "Service"    ? kServices
                 : kind == "Deployment" ? kDeployments
                                        : kPodGroups;
    if (kind == "Secret") {
      desired["data"]["token"] = absl::Base64Escape(RandomToken());
      desired["data"]["join-token"] = absl::Base64Escape(RandomToken());
    }
    auto ok = Ensure(r, v.ns, desired);
    if (!ok.ok()) return ok.status();
    if (!*ok) result.requeue = true;
  }
  auto listed = api_->List(kPods, v.ns, {absl::StrCat(kJobLabel, "=", v.name, ",", kRoleLabel, "=agent")});
  if (!listed.ok()) return listed.status();
  for (const Json& p : (*listed)["items"]) {
    pods.existing[p["metadata"]["name"]] = p;
    std::string phase = PhaseOf(p, "Pending");
    if (phase == "Failed")
      pods.failed++;
    else if (phase == "Succeeded")
      pods.succeeded++;
    else
      pods.active++;
    for (const Json& c : At(At(p, "status"), "conditions"))
      if (c.value("type", "") == "Ready" && c.value("status", "") == "True") pods.ready++;
  }
  return EnsureAgentPods(v, children, terminal, pods, result);
}

absl::Status Reconciler::EnsureAgentPods(const JobView& v, const Json& children, bool terminal, const AgentPods& pods,
                                         ReconcileResult& result) {
  const std::string clean = At(v.run_policy, "cleanPodPolicy").is_string()
                                ? v.run_policy["cleanPodPolicy"].get<std::string>()
                                : "Running";
  const int want = v.suspended || (terminal && clean != "None") ? 0 : v.nodes;
  std::set<std::string> wanted;
  for (const Json& c : children) {
    if (c["kind"] != "Pod") continue;
    const std::string pod = c["metadata"]["name"];
    int idx = std::stoi(c["metadata"]["labels"]["loom.dev/node-rank"].get<std::string>());
    if (idx >= want) continue;
    wanted.insert(pod);
    auto it = pods.existing.find(pod);
    if (it != pods.existing.end()) {
      std::string phase = PhaseOf(it->second, "");
      if (phase == "Failed" || phase == "Succeeded") {  // replace a dead agent pod
        absl::Status s = api_->Delete(kPods, v.ns, pod);
        if (!s.ok() && !absl::IsNotFound(s)) return s;
        result.requeue = true;
        continue;
      }
    }
    auto ok = Ensure(kPods, v.ns, c);
    if (!ok.ok()) return ok.status();
    if (!*ok) result.requeue = true;
  }
  for (const auto& [pod, p] : pods.existing) {
    if (wanted.count(pod)) continue;
    if (!OwnedBy(p, v.uid)) continue;
    std::string phase = PhaseOf(p, "Pending");
    if (terminal && clean == "Running" && (phase == "Succeeded" || phase == "Failed")) continue;
    absl::Status s = api_->Delete(kPods, v.ns, pod);
    if (!s.ok() && !absl::IsNotFound(s)) return s;
  }
  return absl::OkStatus();
}

std::string Reconciler::CoordinatorAddress(const std::string& ns, const Json& job) const {
  const Json& annotated = At(At(At(job, "metadata"), "annotations"), "loom.dev/coordinator-address");
  if (annotated.is_string()) return annotated.get<std::string>();
  const std::string name = job["metadata"]["name"];
  return opts_.coordinator_address ? opts_.coordinator_address(ns, name)
                                   : absl::StrCat(name, "-coordinator.", ns, ".svc:7070");
}

std::unique_ptr<CoordinatorClient> Reconciler::Connect(const JobView& v, const std::string& address) {
  std::optional<std::string> tok = ReadToken(api_, v.ns, v.name);
  return tok ? connect_(address, *tok) : nullptr;
}

absl::Status Reconciler::SyncLoomJob(const JobView& v, bool terminal, const AgentPods& pods, Json& status,
                                     ReconcileResult& result) {
  const std::string addr = CoordinatorAddress(v.ns, v.job);
  if (terminal) return absl::OkStatus();
  if (v.suspended) return SuspendLoomJob(v, addr, status);
  std::unique_ptr<CoordinatorClient> c = Connect(v, addr);
  if (!c) {
    result.requeue = true;
    result.requeue_after = absl::Seconds(2);
    if (status.value("state", "") == "Suspended")
      SetState(status, "Created", "Resumed", "waiting for the coordinator", v.gen, v.now);
  } else {
    absl::StatusOr<v1::JobStatus> js = SubmitOrGet(v, *c, status, result);
    if (js.ok()) {
      WatchOrStop(v, addr, *js);
      ApplyJobStatus(*js, v.spec, v.gen, v.now, status);
    } else if (!absl::IsNotFound(js.status()) && !Terminal(status)) {
      result.requeue = true;
      result.requeue_after = absl::Seconds(2);
    }
    EnforceDeadline(v.run_policy, *c, v.gen, v.now, status);
  }
  CheckGang(v, pods, status);
  return absl::OkStatus();
}

absl::Status Reconciler::SuspendLoomJob(const JobView& v, const std::string& address, Json& status) {
  const std::string job_id = status.value("jobId", "");
  if (!job_id.empty()) {
    std::unique_ptr<CoordinatorClient> c = Connect(v, address);
    if (!c) return absl::UnavailableError("coordinator unreachable: cannot cancel for suspend");
    absl::Status s = c->Cancel(job_id);
    if (!s.ok() && !absl::IsNotFound(s) && !absl::IsFailedPrecondition(s)) return s;
    status["jobId"] = "";
    status["attempt"] = status.value("attempt", 0) + 1;
  }
  SetState(status, "Suspended", "Suspended", "runPolicy.suspend is true: scaled to zero", v.gen, v.now);
  return absl::OkStatus();
}

absl::StatusOr<v1::JobStatus> Reconciler::SubmitOrGet(const JobView& v, CoordinatorClient& c, Json& status,
                                                      ReconcileResult& result) {
  const std::string job_id = status.value("jobId", "");
  if (!job_id.empty()) {
    absl::StatusOr<v1::JobStatus> js = c.Get(job_id);
    if (absl::IsNotFound(js.status())) {
      status["jobId"] = "";  // coordinator lost its state: resubmit
      status["attempt"] = status.value("attempt", 0) + 1;
      result.requeue = true;
    }
    return js;
  }
  auto parsed = runtime::jobspec::ParseJobSpecYaml(At(v.spec, "job").dump());
  if (!parsed.ok()) {
    SetState(status, "Failed", "InvalidSpec", std::string(parsed.status().message()), v.gen, v.now);
    return parsed.status();
  }
  v1::JobSpec jspec = *parsed;
  if (absl::Status g = CheckPodGpus(v.spec, jspec, opts_.max_gpus_per_node); !g.ok()) {
    SetState(status, "Failed", "GpusUnavailable", std::string(g.message()), v.gen, v.now);
    return g;
  }
  if (jspec.name().empty()) jspec.set_name(v.name);
  jspec.set_max_restarts(IntAt(v.run_policy, "backoffLimit", jspec.max_restarts()));
  const Json& sched = At(v.spec, "scheduling");
  if (At(sched, "priority").is_number_integer()) jspec.set_priority(sched["priority"].get<int>());
  absl::StatusOr<v1::JobStatus> js = c.Submit(jspec, absl::StrCat(v.uid, "-", status.value("attempt", 0)));
  if (js.ok())
    status["jobId"] = js->job_id();
  else if (absl::IsInvalidArgument(js.status()) || absl::IsFailedPrecondition(js.status()))
    SetState(status, "Failed", "SubmitRejected", std::string(js.status().message()), v.gen, v.now);
  return js;
}

// Status changes of a live Loom job arrive by its WatchJob stream; a finished
// job's stream is stopped.
void Reconciler::WatchOrStop(const JobView& v, const std::string& address, const v1::JobStatus& j) {
  const bool done = j.state() == v1::SUCCEEDED || j.state() == v1::FAILED || j.state() == v1::CANCELLED;
  if (!done && !j.job_id().empty()) {
    std::optional<std::string> tok = ReadToken(api_, v.ns, v.name);
    if (tok) EnsureWatcher(v.ns, v.name, j.job_id(), address, *tok);
  } else {
    StopWatcher(v.ns + "/" + v.name);
  }
}

// Gang scheduling without a PodGroup: all agent pods ready within
// scheduling.gang.timeoutSeconds, else the attempt's pods are deleted (and
// recreated by the next pass).
void Reconciler::CheckGang(const JobView& v, const AgentPods& pods, Json& status) {
  const Json& gang = At(At(v.spec, "scheduling"), "gang");
  if (!BoolAt(gang, "enabled") || BoolAt(gang, "podGroup") || Terminal(status)) return;
  if (pods.ready >= v.nodes) {
    status.erase("gangWaitStart");
  } else if (!status.contains("gangWaitStart")) {
    status["gangWaitStart"] = Rfc3339(v.now);
  } else if (v.now - ParseTime(status["gangWaitStart"], v.now) > absl::Seconds(IntAt(gang, "timeoutSeconds", 300))) {
    for (const auto& [pod, p] : pods.existing) (void)api_->Delete(kPods, v.ns, pod);
    status["gangWaitStart"] = Rfc3339(v.now);
    SetCondition(status, "Restarting", true, "GangTimeout",
                 absl::StrCat("only ", pods.ready, " of ", v.nodes, " agent pods ready in time: recreated"), v.gen,
                 v.now);
  }
}

// When the next pass is due: a finished job is deleted ttlSecondsAfterFinished
// after completion (then finalized), a live one is polled every poll_interval.
absl::Status Reconciler::ScheduleNextPass(const JobView& v, const Json& status, ReconcileResult& result) {
  if (Terminal(status)) {
    const int ttl = IntAt(v.run_policy, "ttlSecondsAfterFinished", -1);
    if (ttl >= 0) {
      absl::Time done = ParseTime(At(status, "completionTime"), v.now);
      if (v.now >= done + absl::Seconds(ttl)) {
        absl::Status s = api_->Delete(kTrainingJobs, v.ns, v.name);
        if (!s.ok() && !absl::IsNotFound(s)) return s;
        result.requeue = true;  // finalize next
      } else {
        result.requeue = true;
        result.requeue_after = done + absl::Seconds(ttl) - v.now;
      }
    }
  } else if (!result.requeue) {
    result.requeue = true;
    result.requeue_after = opts_.poll_interval;  // poll the coordinator
  }
  return absl::OkStatus();
}

}  // namespace loom::deploy::operator_
