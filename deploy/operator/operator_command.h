// `loom_operator`: the Kubernetes operator for TrainingJobs (loom.dev/v1).
//
//   loom_operator [--kubeconfig PATH] [--context NAME] [--namespace NS]
//                 [--image IMAGE] [--resync-s N] [--poll-ms N] [--max-gpus-per-node N] [--once]
//   loom_operator --render TRAININGJOB.yaml   print the child objects (JSON list)
//
// Credentials: --kubeconfig (env KUBECONFIG) when given, else in-cluster (the
// pod's service account). Namespace: --namespace, env LOOM_OPERATOR_NAMESPACE,
// else the credentials' namespace. Image for agent/coordinator pods when a job
// names none: --image, env LOOM_OPERATOR_IMAGE, else "loom".
//
// It list+watches TrainingJobs and the pods labelled loom.dev/job in the
// namespace (resuming after disconnects, relisting after 410 Gone), queues the
// job of every event, reconciles one job at a time (reconciler.h) and requeues
// per the result, with a full resync every --resync-s seconds (default 30);
// a live job's coordinator status is polled every --poll-ms (default 5000).
// --max-gpus-per-node N: the most nvidia.com/gpu a node of the cluster offers;
// a device: cuda job whose agent pod asks for more fails before it is
// submitted (unset: not checked).
// SIGINT/SIGTERM stop it (exit 0). --once reconciles every job once and exits.
// Exit codes: 0 ok, 1 runtime failure (no credentials, API unreachable), 2 bad
// usage.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "deploy/operator/kube_client.h"

namespace loom::deploy::operator_ {

int RunOperatorCommand(const std::vector<std::string>& args);

// YAML text (one document) to JSON, keeping quoted scalars as strings.
absl::StatusOr<Json> YamlToJson(const std::string& yaml);

}  // namespace loom::deploy::operator_
