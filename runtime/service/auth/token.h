// Bearer-token authentication for the coordinator's gRPC services.
//
// Two tokens live in the coordinator's data folder, each 32 random bytes from
// /dev/urandom, hex-encoded, written with mode 0600 (created exclusively,
// fsynced) at the first start and read back later; a file readable by group or
// others is refused (FailedPrecondition):
//   <data_dir>/token       the user token: JobService only. Clients (the CLI)
//                          find it with FindClientToken: env LOOM_TOKEN first,
//                          then <data_dir>/token (data_dir: DefaultDataDir()).
//   <data_dir>/join-token  the agents' join token: NodeService.RegisterAgent
//                          only, exchanged there for a per-agent secret.
// An agent then calls NodeService with `Bearer <agent id>:<secret>`
// (AgentBearer); the coordinator keeps only the secret's SHA-256.
//
// Named tokens: a tokens file (`loom coordinator --tokens-file`) maps names to
// user tokens, one "name token" per line; the user token file is the name
// "default". A TokenSet holds them all; the name of the token a call presents
// is who made it (a job records it as its submitter).
//
// Servers check each call's `authorization: Bearer <token>` metadata with
// CheckAuthorization (constant-time compare) and answer UNAUTHENTICATED when it
// is missing or wrong.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"

namespace loom::runtime::service::auth {

inline constexpr char kTokenFile[] = "token";
inline constexpr char kJoinTokenFile[] = "join-token";
inline constexpr char kDefaultTokenName[] = "default";
inline constexpr size_t kMinNamedTokenLength = 16;

struct NamedToken {
  std::string name;
  std::string token;
};

class TokenSet {
 public:
  TokenSet() = default;
  explicit TokenSet(std::vector<NamedToken> tokens) : tokens_(std::move(tokens)) {}
  // The name of the token equal to `bearer` (each entry compared in constant
  // time); empty when none is.
  std::string NameOf(const std::string& bearer) const;
  const std::vector<NamedToken>& tokens() const { return tokens_; }

 private:
  std::vector<NamedToken> tokens_;
};

// A tokens file: lines "name token" (blank lines and lines starting with '#'
// are skipped). Names are [A-Za-z0-9._-]{1,64}, tokens printable ASCII without
// spaces, at least kMinNamedTokenLength bytes; names and tokens are unique.
// InvalidArgument "tokens_file: <path>:<line>: ..." on a bad line (the token is
// never quoted), NotFound when missing, FailedPrecondition when readable by
// group or others or holding no token.
absl::StatusOr<std::vector<NamedToken>> ReadTokensFile(const std::string& path);

// env LOOM_DATA_DIR, else $HOME/.loom, else ./.loom.
std::string DefaultDataDir();

// <data_dir>/<file> (kTokenFile or kJoinTokenFile), created at the first call.
absl::StatusOr<std::string> LoadOrCreateToken(const std::string& data_dir, const char* file = kTokenFile);

// A token file's content (whitespace stripped). NotFound when it is missing;
// FailedPrecondition when it is empty or, with `check_mode`, readable by group
// or others.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path, bool check_mode);

// env LOOM_TOKEN if set and non-empty, else the token file in data_dir (empty:
// DefaultDataDir()). NotFound names both places when neither has a token.
absl::StatusOr<std::string> FindClientToken(const std::string& data_dir = "");

// `nbytes` bytes from /dev/urandom, hex-encoded (tokens, per-job secrets).
absl::StatusOr<std::string> RandomHex(int nbytes);

bool ConstantTimeEquals(const std::string& a, const std::string& b);

// SHA-256 of `data`, hex-encoded.
std::string Sha256Hex(const std::string& data);

// The value after "Bearer " in the call's authorization metadata; empty when
// there is none.
std::string BearerOf(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata);

// "<agent id>:<secret>", an agent's NodeService bearer value.
std::string AgentBearer(const std::string& agent_id, const std::string& secret);
// Splits an AgentBearer value; false when it is not one.
bool SplitAgentBearer(const std::string& bearer, std::string* agent_id, std::string* secret);

// OK when `metadata` holds "authorization: Bearer <token>"; UNAUTHENTICATED
// otherwise (the message says whether it was missing or wrong, never the token).
grpc::Status CheckAuthorization(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                                const std::string& token);

// Like CheckAuthorization over a TokenSet; on success sets *name to the
// matching token's name.
grpc::Status CheckAuthorization(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                                const TokenSet& tokens, std::string* name);

// Adds the bearer metadata to a client call.
void AddBearer(grpc::ClientContext* ctx, const std::string& token);

}  // namespace loom::runtime::service::auth
