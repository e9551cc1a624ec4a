#include "runtime/launch/slurm_env.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace loom::runtime::launch {
namespace {

absl::Status BadList(const std::string& list, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("SLURM_NODELIST: '", list, "': ", why));
}

// Splits on commas outside brackets.
absl::StatusOr<std::vector<std::string>> SplitTop(const std::string& list) {
  std::vector<std::string> parts;
  std::string cur;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']' && --depth < 0) return BadList(list, "']' without '['");
    if (depth > 1) return BadList(list, "nested '['");
    if (c == ',' && depth == 0) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (depth != 0) return BadList(list, "'[' without ']'");
  parts.push_back(cur);
  return parts;
}

// One bracket's numbers ("1-3,07") appended to `prefix`, then `suffix`.
absl::Status ExpandRange(const std::string& list, const std::string& prefix, const std::string& inner,
                         const std::string& suffix, std::vector<std::string>* out) {
  for (const std::string& item : std::vector<std::string>(absl::StrSplit(inner, ','))) {
    std::vector<std::string> ends = absl::StrSplit(item, '-');
    int64_t lo = 0, hi = 0;
    if (ends.size() > 2 || ends[0].empty() || !absl::SimpleAtoi(ends[0], &lo) || lo < 0 ||
        ends[0].find_first_not_of("0123456789") != std::string::npos)
      return BadList(list, absl::StrCat("bad range '", item, "'"));
    hi = lo;
    if (ends.size() == 2 && (ends[1].empty() || ends[1].find_first_not_of("0123456789") != std::string::npos ||
                             !absl::SimpleAtoi(ends[1], &hi) || hi < lo))
      return BadList(list, absl::StrCat("bad range '", item, "'"));
    if (hi - lo > 100000) return BadList(list, absl::StrCat("range '", item, "' is too long"));
    const size_t width = ends[0].size();
    for (int64_t n = lo; n <= hi; ++n) {
      std::string num = absl::StrCat(n);
      if (num.size() < width) num.insert(0, width - num.size(), '0');
      out->push_back(absl::StrCat(prefix, num, suffix));
    }
  }
  return absl::OkStatus();
}

// `name` (or `alt` when `name` is unset) as an integer >= min; `fallback`
// when both are unset, or an error when there is none.
absl::StatusOr<int> IntVar(const GetEnv& env, const char* name, int min, std::optional<int> fallback,
                           const char* alt = nullptr) {
  const char* v = env(name);
  const char* used = name;
  if ((v == nullptr || *v == '\0') && alt != nullptr) {
    v = env(alt);
    used = alt;
  }
  if (v == nullptr || *v == '\0') {
    if (fallback.has_value()) return *fallback;
    return absl::InvalidArgumentError(absl::StrCat(alt ? alt : name, ": not set inside a Slurm job"));
  }
  int n = 0;
  if (!absl::SimpleAtoi(v, &n) || n < min)
    return absl::InvalidArgumentError(absl::StrCat(used, ": expected an integer >= ", min, ", got '", v, "'"));
  return n;
}

std::string StrVar(const GetEnv& env, const char* name, const char* alt = nullptr) {
  const char* v = env(name);
  if ((v == nullptr || *v == '\0') && alt != nullptr) v = env(alt);
  return v ? v : "";
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandHostlist(const std::string& list) {
  if (list.empty()) return BadList(list, "empty");
  auto parts = SplitTop(list);
  if (!parts.ok()) return parts.status();
  std::vector<std::string> out;
  for (const std::string& p : *parts) {
    if (p.empty()) return BadList(list, "empty host name");
    const size_t open = p.find('[');
    if (open == std::string::npos) {
      out.push_back(p);
      continue;
    }
    const size_t close = p.find(']', open);
    if (p.find('[', open + 1) != std::string::npos) return BadList(list, absl::StrCat("'", p, "': one range per name"));
    if (absl::Status s = ExpandRange(list, p.substr(0, open), p.substr(open + 1, close - open - 1), p.substr(close + 1),
                                     &out);
        !s.ok())
      return s;
  }
  return out;
}

absl::StatusOr<std::optional<SlurmAllocation>> SlurmFromEnv(const GetEnv& env) {
  SlurmAllocation a;
  a.job_id = StrVar(env, "SLURM_JOB_ID", "SLURM_JOBID");
  if (a.job_id.empty()) return std::nullopt;
  a.step_id = StrVar(env, "SLURM_STEP_ID", "SLURM_STEPID");
  const std::string list = StrVar(env, "SLURM_STEP_NODELIST", "SLURM_NODELIST");
  auto nodes = ExpandHostlist(list);
  if (!nodes.ok()) return nodes.status();
  a.nodes = *nodes;
  auto nnodes = IntVar(env, "SLURM_STEP_NUM_NODES", 1, std::nullopt, "SLURM_NNODES");
  auto node_id = IntVar(env, "SLURM_NODEID", 0, std::nullopt);
  auto ntasks = IntVar(env, "SLURM_STEP_NUM_TASKS", 1, 1, "SLURM_NTASKS");
  auto procid = IntVar(env, "SLURM_PROCID", 0, 0);
  auto localid = IntVar(env, "SLURM_LOCALID", 0, 0);
  auto cpus = IntVar(env, "SLURM_CPUS_ON_NODE", 1, 0);
  auto gpus = IntVar(env, "SLURM_GPUS_ON_NODE", 0, -1);
  auto restart = IntVar(env, "SLURM_RESTART_COUNT", 0, 0);
  for (const auto* s : {&nnodes, &node_id, &ntasks, &procid, &localid, &cpus, &gpus, &restart})
    if (!s->ok()) return s->status();
  a.nnodes = *nnodes;
  a.node_id = *node_id;
  a.ntasks = *ntasks;
  a.procid = *procid;
  a.localid = *localid;
  a.cpus_on_node = *cpus;
  a.gpus_on_node = *gpus;
  a.restart_count = *restart;
  if (static_cast<int>(a.nodes.size()) != a.nnodes)
    return absl::InvalidArgumentError(absl::StrCat("SLURM_NODELIST: '", list, "' names ", a.nodes.size(),
                                                   " nodes, but SLURM_NNODES is ", a.nnodes));
  if (a.node_id >= a.nnodes)
    return absl::InvalidArgumentError(
        absl::StrCat("SLURM_NODEID: ", a.node_id, " is not below SLURM_NNODES (", a.nnodes, ")"));
  a.submit_dir = StrVar(env, "SLURM_SUBMIT_DIR");
  a.cluster = StrVar(env, "SLURM_CLUSTER_NAME");
  const std::string comm_host = StrVar(env, "SLURM_SRUN_COMM_HOST"), comm_port = StrVar(env, "SLURM_SRUN_COMM_PORT");
  if (!comm_port.empty()) a.launcher = absl::StrCat(comm_host, "-", comm_port);
  for (const std::string* part : {&a.job_id, &a.step_id, &a.cluster, &a.launcher})
    if (part->find('/') != std::string::npos)
      return absl::InvalidArgumentError(absl::StrCat("Slurm job, step or cluster name '", *part, "': contains '/'"));
  return a;
}

absl::StatusOr<NodeGroup> NodeGroupFromSlurm(const SlurmAllocation& a) {
  if (a.ntasks != a.nnodes)
    return absl::InvalidArgumentError(absl::StrCat(
        "SLURM_NTASKS: loom run runs one task per node (it starts the ranks itself), but this step has ", a.ntasks,
        " tasks on ", a.nnodes, " nodes; use srun --ntasks-per-node=1"));
  if (a.submit_dir.empty())
    return absl::InvalidArgumentError("SLURM_SUBMIT_DIR: not set; the nodes meet in a folder under it");
  NodeGroup g;
  g.nnodes = a.nnodes;
  g.node_rank = a.node_id;
  g.node_name = a.nodes[a.node_id];
  g.rdzv_dir = absl::StrCat(a.submit_dir, "/.loom-slurm/", a.cluster.empty() ? "slurm" : a.cluster, ".", a.job_id, ".",
                            a.step_id.empty() ? "batch" : a.step_id, ".", a.restart_count,
                            a.launcher.empty() ? "" : ".", a.launcher);
  g.local_cpus = a.cpus_on_node;
  g.local_gpus = a.gpus_on_node;
  return g;
}

}  // namespace loom::runtime::launch
