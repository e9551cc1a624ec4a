#include "dtensor/spec.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace loom::dtensor {

std::string Placement::ToString() const {
  switch (kind) {
    case PlacementKind::kReplicate:
      return "R";
    case PlacementKind::kShard:
      return absl::StrCat("S(", dim, ")");
    case PlacementKind::kPartial:
      return op == PartialOp::kSum ? "P(sum)" : "P(avg)";
  }
  return "?";
}

bool Placement::operator==(const Placement& o) const {
  if (kind != o.kind) return false;
  if (kind == PlacementKind::kShard) return dim == o.dim;
  if (kind == PlacementKind::kPartial) return op == o.op;
  return true;
}

absl::StatusOr<Placement> ParsePlacement(absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  if (t == "R") return Placement::Replicate();
  if (t == "P" || t == "P(sum)") return Placement::Partial(PartialOp::kSum);
  if (t == "P(avg)") return Placement::Partial(PartialOp::kAvg);
  if (absl::ConsumePrefix(&t, "S(") && absl::ConsumeSuffix(&t, ")")) {
    int d = 0;
    if (absl::SimpleAtoi(t, &d) && d >= 0) return Placement::Shard(d);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("placement: expected R, S(dim), P(sum) or P(avg), got '", text, "'"));
}

int64_t MeshShape::num_ranks() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

absl::StatusOr<int> MeshShape::DimIndex(absl::string_view name) const {
  for (int i = 0; i < ndim(); ++i)
    if (names[i] == name) return i;
  return absl::NotFoundError(absl::StrCat("mesh ", ToString(), " has no dimension '", name, "'"));
}

std::vector<int64_t> MeshShape::Coordinates(int64_t rank) const {
  std::vector<int64_t> c(sizes.size());
  for (int i = ndim() - 1; i >= 0; --i) {
    c[i] = rank % sizes[i];
    rank /= sizes[i];
  }
  return c;
}

int64_t MeshShape::RankAt(const std::vector<int64_t>& coords) const {
  int64_t r = 0;
  for (int i = 0; i < ndim(); ++i) r = r * sizes[i] + coords[i];
  return r;
}

std::string MeshShape::ToString() const {
  std::vector<std::string> parts;
  for (int i = 0; i < ndim(); ++i) parts.push_back(absl::StrCat(names[i], "=", sizes[i]));
  return absl::StrCat("(", absl::StrJoin(parts, ", "), ")");
}

absl::Status MeshShape::Validate() const {
  if (names.size() != sizes.size())
    return absl::InvalidArgumentError(absl::StrCat("mesh: ", names.size(), " names for ", sizes.size(), " sizes"));
  std::set<std::string> seen;
  for (int i = 0; i < ndim(); ++i) {
    if (names[i].empty()) return absl::InvalidArgumentError(absl::StrCat("mesh: dimension ", i, " has no name"));
    if (!seen.insert(names[i]).second)
      return absl::InvalidArgumentError(absl::StrCat("mesh: dimension name '", names[i], "' repeats"));
    if (sizes[i] < 1)
      return absl::InvalidArgumentError(absl::StrCat("mesh: dimension '", names[i], "' has size ", sizes[i],
                                                     "; sizes must be >= 1"));
  }
  return absl::OkStatus();
}

DTensorSpec DTensorSpec::Replicated(const MeshShape& mesh) {
  return DTensorSpec{mesh, std::vector<Placement>(mesh.sizes.size(), Placement::Replicate())};
}

bool DTensorSpec::is_replicated() const {
  for (const Placement& p : placements)
    if (!p.is_replicate()) return false;
  return true;
}

bool DTensorSpec::has_partial() const {
  for (const Placement& p : placements)
    if (p.is_partial()) return true;
  return false;
}

absl::Status DTensorSpec::Validate(int tensor_ndim) const {
  if (static_cast<int>(placements.size()) != mesh.ndim())
    return absl::InvalidArgumentError(absl::StrCat("spec: ", placements.size(), " placements for mesh ",
                                                   mesh.ToString(), " of ", mesh.ndim(), " dims"));
  for (int i = 0; i < mesh.ndim(); ++i) {
    const Placement& p = placements[i];
    if (p.is_shard() && (p.dim < 0 || p.dim >= tensor_ndim))
      return absl::InvalidArgumentError(absl::StrCat("spec: mesh dim '", mesh.names[i], "' shards tensor dim ",
                                                     p.dim, " of a ", tensor_ndim, "-d tensor"));
  }
  return absl::OkStatus();
}

std::string DTensorSpec::ToString() const {
  std::vector<std::string> parts;
  for (size_t i = 0; i < placements.size(); ++i)
    parts.push_back(absl::StrCat(i < mesh.names.size() ? mesh.names[i] : "?", "=", placements[i].ToString()));
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

absl::StatusOr<DTensorSpec> ParseSpec(absl::string_view text, const MeshShape& mesh) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  absl::ConsumePrefix(&t, "[");
  absl::ConsumeSuffix(&t, "]");
  DTensorSpec spec{mesh, std::vector<Placement>(mesh.sizes.size(), Placement::Replicate())};
  std::vector<std::string> items;
  // Split on commas outside parentheses ("S(0),R").
  int depth = 0;
  std::string cur;
  for (char ch : t) {
    if (ch == '(') ++depth;
    if (ch == ')') --depth;
    if (ch == ',' && depth == 0) {
      items.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(ch);
    }
  }
  if (!cur.empty() || !items.empty()) items.push_back(cur);
  if (static_cast<int>(items.size()) != mesh.ndim())
    return absl::InvalidArgumentError(absl::StrCat("spec '", text, "': ", items.size(),
                                                   " placements for mesh ", mesh.ToString()));
  for (int i = 0; i < mesh.ndim(); ++i) {
    absl::string_view item = absl::StripAsciiWhitespace(items[i]);
    std::vector<absl::string_view> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    absl::string_view pl = item;
    int slot = i;
    if (kv.size() == 2) {
      auto idx = mesh.DimIndex(absl::StripAsciiWhitespace(kv[0]));
      if (!idx.ok()) return absl::InvalidArgumentError(absl::StrCat("spec '", text, "': ", idx.status().message()));
      slot = *idx;
      pl = kv[1];
    }
    auto p = ParsePlacement(pl);
    if (!p.ok()) return absl::InvalidArgumentError(absl::StrCat("spec '", text, "': ", p.status().message()));
    spec.placements[slot] = *p;
  }
  return spec;
}

Range ChunkRange(int64_t n, int64_t k, int64_t i) {
  int64_t chunk = k <= 0 ? n : (n + k - 1) / k;
  int64_t off = std::min(n, i * chunk);
  int64_t end = std::min(n, off + chunk);
  return {off, end - off};
}

absl::StatusOr<std::vector<Range>> LocalBlock(const std::vector<int64_t>& global_shape, const DTensorSpec& spec,
                                              const std::vector<int64_t>& coords) {
  const int nd = static_cast<int>(global_shape.size());
  absl::Status st = spec.Validate(nd);
  if (!st.ok()) return st;
  if (static_cast<int>(coords.size()) != spec.mesh.ndim())
    return absl::InvalidArgumentError(absl::StrCat("coords: ", coords.size(), " for mesh ", spec.mesh.ToString()));
  std::vector<Range> block(nd);
  for (int d = 0; d < nd; ++d) block[d] = {0, global_shape[d]};
  for (int m = 0; m < spec.mesh.ndim(); ++m) {
    const Placement& p = spec.placements[m];
    if (!p.is_shard()) continue;
    Range r = ChunkRange(block[p.dim].length, spec.mesh.sizes[m], coords[m]);
    block[p.dim] = {block[p.dim].offset + r.offset, r.length};
  }
  return block;
}

absl::StatusOr<std::vector<int64_t>> LocalShape(const std::vector<int64_t>& global_shape, const DTensorSpec& spec,
                                                const std::vector<int64_t>& coords) {
  auto block = LocalBlock(global_shape, spec, coords);
  if (!block.ok()) return block.status();
  std::vector<int64_t> shape;
  for (const Range& r : *block) shape.push_back(r.length);
  return shape;
}

}  // namespace loom::dtensor
