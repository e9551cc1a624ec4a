#include "collectives/tools/flight_recorder_diff.h"

#include <algorithm>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace loom::collectives::tools {
namespace {

std::string Describe(const OpRecord& r) {
  return absl::StrCat(r.op, " (", r.dtype, ", ", r.numel, " elements, state ", OpStateName(r.state), ")");
}

bool SameOp(const OpRecord& a, const OpRecord& b) {
  return a.op == b.op && a.dtype == b.dtype && a.numel == b.numel;
}

}  // namespace

absl::StatusOr<std::vector<OpRecord>> ParseFlightRecorderDump(absl::string_view text) {
  std::vector<OpRecord> out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    ++line_no;
    OpRecord r;
    bool has_seq = false, has_op = false;
    for (absl::string_view field : absl::StrSplit(line, ' ')) {
      std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(field, absl::MaxSplits('=', 1));
      if (kv.first == "seq") has_seq = absl::SimpleAtoi(kv.second, &r.seq);
      if (kv.first == "op") { r.op = std::string(kv.second); has_op = true; }
      if (kv.first == "dtype") r.dtype = std::string(kv.second);
      if (kv.first == "numel") (void)absl::SimpleAtoi(kv.second, &r.numel);
      if (kv.first == "state") {
        if (kv.second == "ok") r.state = OpRecord::State::kOk;
        if (kv.second == "failed") r.state = OpRecord::State::kFailed;
        if (kv.second == "running") r.state = OpRecord::State::kRunning;
      }
      if (kv.first == "error") break;  // free text to the end of the line
    }
    if (!has_seq || !has_op) {
      return absl::InvalidArgumentError(absl::StrCat("flight recorder dump: line ", line_no,
                                                     ": expected seq= and op= fields"));
    }
    out.push_back(std::move(r));
  }
  return out;
}

absl::StatusOr<Divergence> FindDivergence(const std::vector<RankDump>& dumps) {
  std::map<int, std::map<uint64_t, OpRecord>> ops;  // rank -> seq -> op
  uint64_t start = 0, end = 0;
  for (const RankDump& d : dumps) {
    auto parsed = ParseFlightRecorderDump(d.text);
    if (!parsed.ok()) return parsed.status();
    auto& m = ops[d.rank];
    for (auto& r : *parsed) m[r.seq] = r;
    if (!m.empty()) {
      start = std::max(start, m.begin()->first);
      end = std::max(end, m.rbegin()->first + 1);
    }
  }
  Divergence out;
  for (uint64_t seq = start; seq < end; ++seq) {
    std::vector<int> have, lack;
    for (auto& [rank, m] : ops) (m.count(seq) ? have : lack).push_back(rank);
    if (!lack.empty()) {
      out.found = true;
      out.seq = seq;
      if (have.size() <= lack.size()) {
        const OpRecord& r = ops[have[0]][seq];
        out.kind = "extra";
        out.rank = have[0];
        out.description = absl::StrCat("seq ", seq, ": rank(s) ", absl::StrJoin(have, ", "),
                                       " issued an extra ", Describe(r), " that rank(s) ",
                                       absl::StrJoin(lack, ", "), " never issued");
      } else {
        out.kind = "missing";
        out.rank = lack[0];
        out.description = absl::StrCat("seq ", seq, ": rank(s) ", absl::StrJoin(lack, ", "),
                                       " never issued the ", Describe(ops[have[0]][seq]),
                                       " that rank(s) ", absl::StrJoin(have, ", "), " issued");
      }
      return out;
    }
    // Everyone has it: group by signature; the minority is to blame.
    std::map<std::string, std::vector<int>> groups;
    for (auto& [rank, m] : ops) {
      const OpRecord& r = m[seq];
      groups[absl::StrCat(r.op, "/", r.dtype, "/", r.numel)].push_back(rank);
    }
    if (groups.size() > 1) {
      auto minority = std::min_element(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
        return a.second.size() < b.second.size();
      });
      auto majority = std::max_element(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
        return a.second.size() < b.second.size();
      });
      if (minority == majority) minority = std::next(groups.begin());
      int bad = minority->second[0], good = majority->second[0];
      out.found = true;
      out.seq = seq;
      out.kind = "mismatch";
      out.rank = bad;
      out.description = absl::StrCat("seq ", seq, ": rank(s) ", absl::StrJoin(minority->second, ", "),
                                     " issued ", Describe(ops[bad][seq]), " while rank(s) ",
                                     absl::StrJoin(majority->second, ", "), " issued ",
                                     Describe(ops[good][seq]));
      return out;
    }
  }
  out.description = "no divergence: every rank issued the same ops";
  return out;
}

}  // namespace loom::collectives::tools
