// Einsum, composed from registry ops.
//
//   1. Parse the equation; "..." stands for the same run of broadcast dims in
//      every operand (right-aligned). Without "->" the output is the
//      ellipsis dims, then the letters used once, in alphabetical order.
//   2. Per operand: a repeated letter (a diagonal, "ii") is multiplied by a
//      constant identity mask and summed over its second position; letters
//      no later operand or the output needs are summed out.
//   3. Operands are contracted left to right as batched matrix products:
//      A -> [batch, A-only, contracted], B -> [batch, contracted, B-only],
//      `matmul`, then reshaped back to batch + A-only + B-only dims. A size-1
//      dim meeting a larger one is broadcast first.
//   4. A final `permute` puts the letters in output order.
// Autodiff covers Einsum through mul, sum, permute, reshape, broadcast_to and
// matmul.
#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status.h"
#include "compiler/import/onnx/op_table.h"

namespace loom::compiler::import::onnx {
namespace {

// Labels: ellipsis dims are 0 .. E-1; letters are 1000 + character.
using Labels = std::vector<int>;

struct Term {
  Val v;
  Labels labels;
};

absl::StatusOr<Labels> ParseTerm(const NodeCtx& n, const std::string& term, int rank, int* ellipsis_rank, int e_max) {
  Labels out;
  const size_t dots = term.find("...");
  int letters = 0;
  for (char c : term)
    if (std::isalpha(static_cast<unsigned char>(c))) ++letters;
    else if (c != '.') return n.Error(absl::StrCat("equation term '", term, "' has the character '", std::string(1, c), "'"));
  if (dots == std::string::npos && rank >= 0 && letters != rank)
    return n.Error(absl::StrCat("equation term '", term, "' has ", letters, " letters for a rank-", rank, " operand"));
  const int e = dots == std::string::npos ? 0 : (rank >= 0 ? rank - letters : e_max);
  if (e < 0) return n.Error(absl::StrCat("equation term '", term, "' has more letters than its operand's rank ", rank));
  if (ellipsis_rank) *ellipsis_rank = e;
  for (size_t i = 0; i < term.size(); ++i) {
    if (term[i] == '.') {
      if (term.compare(i, 3, "...") != 0 || i != dots) return n.Error(absl::StrCat("malformed ellipsis in '", term, "'"));
      for (int k = 0; k < e; ++k) out.push_back(e_max - e + k);
      i += 2;
      continue;
    }
    out.push_back(1000 + term[i]);
  }
  return out;
}

absl::StatusOr<Val> Permute(NodeCtx& n, const Val& v, const std::vector<int64_t>& perm) {
  bool id = true;
  for (size_t i = 0; i < perm.size(); ++i) id = id && perm[i] == static_cast<int64_t>(i);
  if (id) return v;
  return n.Emit1("permute", {v}, ir::Attrs{{"dims", perm}});
}

absl::StatusOr<Val> Reshape(NodeCtx& n, const Val& v, std::vector<int64_t> shape) {
  if (ShapeVec(v.meta.shape) == shape) return v;
  return n.Emit1("reshape", {v}, ir::Attrs{{"shape", std::move(shape)}});
}

// Sums out labels of `t` for which keep(label) is false.
absl::Status SumOut(NodeCtx& n, Term& t, const std::function<bool(int)>& keep) {
  std::vector<int64_t> axes;
  Labels rest;
  for (size_t i = 0; i < t.labels.size(); ++i) (keep(t.labels[i]) ? rest.push_back(t.labels[i]) : axes.push_back(static_cast<int64_t>(i)));
  if (axes.empty()) return absl::OkStatus();
  LOOM_ASSIGN_OR_RETURN(t.v, n.Emit1("sum", {t.v}, ir::Attrs{{"axes", axes}, {"keepdim", false}}));
  t.labels = rest;
  return absl::OkStatus();
}

// Removes repeated labels by taking diagonals.
absl::Status Diagonals(NodeCtx& n, Term& t) {
  for (;;) {
    int p1 = -1, p2 = -1;
    for (size_t i = 0; i < t.labels.size() && p1 < 0; ++i)
      for (size_t j = i + 1; j < t.labels.size(); ++j)
        if (t.labels[i] == t.labels[j]) {
          p1 = static_cast<int>(i);
          p2 = static_cast<int>(j);
          break;
        }
    if (p1 < 0) return absl::OkStatus();
    const int64_t d = t.v.meta.shape[p1];
    if (t.v.meta.shape[p2] != d) return n.Error("a repeated letter labels dims of different sizes");
    std::vector<int64_t> mshape(t.labels.size(), 1);
    mshape[p1] = mshape[p2] = d;
    Tensor eye = Tensor::Zeros(mshape, t.v.meta.dtype);
    for (int64_t k = 0; k < d; ++k) eye.SetDouble(k * d + k, 1.0);
    LOOM_ASSIGN_OR_RETURN(Val m, n.Emit1("mul", {t.v, n.Const(eye)}));
    LOOM_ASSIGN_OR_RETURN(t.v, n.Emit1("sum", {m}, ir::Attrs{{"axes", std::vector<int64_t>{p2}}, {"keepdim", false}}));
    t.labels.erase(t.labels.begin() + p2);
  }
}

int64_t SizeOf(const Term& t, int label) {
  for (size_t i = 0; i < t.labels.size(); ++i)
    if (t.labels[i] == label) return t.v.meta.shape[i];
  return -1;
}

// Broadcasts size-1 dims of `t` to the other operand's size for shared labels.
absl::Status MatchSizes(NodeCtx& n, Term& t, const Term& other) {
  std::vector<int64_t> to = ShapeVec(t.v.meta.shape);
  for (size_t i = 0; i < t.labels.size(); ++i) {
    const int64_t o = SizeOf(other, t.labels[i]);
    if (o < 0 || o == to[i]) continue;
    if (to[i] != 1 && o != 1) return n.Error("operands give one letter different sizes");
    if (to[i] == 1) to[i] = o;
  }
  if (to == ShapeVec(t.v.meta.shape)) return absl::OkStatus();
  LOOM_ASSIGN_OR_RETURN(t.v, n.Emit1("broadcast_to", {t.v}, ir::Attrs{{"shape", to}}));
  return absl::OkStatus();
}

absl::StatusOr<Term> Contract(NodeCtx& n, Term a, Term b, const std::set<int>& keep) {
  LOOM_RETURN_IF_ERROR(MatchSizes(n, a, b));
  LOOM_RETURN_IF_ERROR(MatchSizes(n, b, a));
  auto in = [](const Labels& l, int x) { return std::find(l.begin(), l.end(), x) != l.end(); };
  Labels batch, con, aonly, bonly;
  for (int l : a.labels) (in(b.labels, l) ? (keep.count(l) ? batch : con) : aonly).push_back(l);
  for (int l : b.labels)
    if (!in(a.labels, l)) bonly.push_back(l);
  auto pos = [](const Labels& l, int x) { return static_cast<int64_t>(std::find(l.begin(), l.end(), x) - l.begin()); };
  auto arrange = [&](Term& t, std::initializer_list<const Labels*> groups) -> absl::StatusOr<Val> {
    std::vector<int64_t> perm, shape;
    for (const Labels* g : groups) {
      int64_t size = 1;
      for (int l : *g) {
        perm.push_back(pos(t.labels, l));
        size *= t.v.meta.shape[perm.back()];
      }
      shape.push_back(size);
    }
    LOOM_ASSIGN_OR_RETURN(Val p, Permute(n, t.v, perm));
    return Reshape(n, p, shape);
  };
  LOOM_ASSIGN_OR_RETURN(Val am, arrange(a, {&batch, &aonly, &con}));
  LOOM_ASSIGN_OR_RETURN(Val bm, arrange(b, {&batch, &con, &bonly}));
  LOOM_ASSIGN_OR_RETURN(Val prod, n.Emit1("matmul", {am, bm}));
  Term out;
  std::vector<int64_t> shape;
  for (const Labels* g : {&batch, &aonly}) {
    for (int l : *g) {
      out.labels.push_back(l);
      shape.push_back(SizeOf(a, l));
    }
  }
  for (int l : bonly) {
    out.labels.push_back(l);
    shape.push_back(SizeOf(b, l));
  }
  LOOM_ASSIGN_OR_RETURN(out.v, Reshape(n, prod, shape));
  return out;
}

absl::StatusOr<Labels> OutputLabels(NodeCtx& n, const std::vector<std::string>& sides, const std::vector<Term>& terms,
                                    int e_max) {
  if (sides.size() == 2) return ParseTerm(n, sides[1], -1, nullptr, e_max);
  std::map<int, int> count;
  for (const Term& t : terms)
    for (int l : t.labels) ++count[l];
  Labels out;
  for (int k = 0; k < e_max; ++k) out.push_back(k);
  for (const auto& [l, c] : count)
    if (l >= 1000 && c == 1) out.push_back(l);
  return out;
}

absl::Status Einsum(NodeCtx& n) {
  LOOM_RETURN_IF_ERROR(n.OnlyAttrs({"equation"}));
  LOOM_ASSIGN_OR_RETURN(std::string eq, n.AttrString("equation", ""));
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  std::vector<std::string> sides = absl::StrSplit(eq, "->");
  if (sides.size() > 2 || eq.empty()) return n.Error(absl::StrCat("malformed equation '", eq, "'"));
  std::vector<std::string> ins = absl::StrSplit(sides[0], ',');
  if (static_cast<int>(ins.size()) != n.NumInputs())
    return n.Error(absl::StrCat("the equation has ", ins.size(), " operands, the node ", n.NumInputs(), " inputs"));
  std::vector<Term> terms(ins.size());
  int e_max = 0;
  for (size_t i = 0; i < ins.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(terms[i].v, n.In(static_cast<int>(i)));
    int e = 0;
    LOOM_RETURN_IF_ERROR(ParseTerm(n, ins[i], static_cast<int>(terms[i].v.meta.shape.size()), &e, 0).status());
    e_max = std::max(e_max, e);
  }
  for (size_t i = 0; i < ins.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(terms[i].labels,
                          ParseTerm(n, ins[i], static_cast<int>(terms[i].v.meta.shape.size()), nullptr, e_max));
    LOOM_RETURN_IF_ERROR(Diagonals(n, terms[i]));
  }
  LOOM_ASSIGN_OR_RETURN(Labels out, OutputLabels(n, sides, terms, e_max));
  const std::set<int> out_set(out.begin(), out.end());
  auto needed_after = [&](size_t k) {
    std::set<int> s = out_set;
    for (size_t j = k + 1; j < terms.size(); ++j) s.insert(terms[j].labels.begin(), terms[j].labels.end());
    return s;
  };
  auto has = [](const Term& t, int l) { return std::find(t.labels.begin(), t.labels.end(), l) != t.labels.end(); };
  Term acc = terms[0];
  std::set<int> keep = needed_after(0);
  LOOM_RETURN_IF_ERROR(SumOut(n, acc, [&](int l) { return keep.count(l) > 0; }));
  for (size_t k = 1; k < terms.size(); ++k) {
    keep = needed_after(k);
    LOOM_RETURN_IF_ERROR(SumOut(n, terms[k], [&](int l) { return keep.count(l) > 0 || has(acc, l); }));
    LOOM_ASSIGN_OR_RETURN(acc, Contract(n, acc, terms[k], keep));
  }
  std::vector<int64_t> perm;
  for (int l : out) {
    auto it = std::find(acc.labels.begin(), acc.labels.end(), l);
    if (it == acc.labels.end()) return n.Error("an output letter appears in no operand");
    perm.push_back(it - acc.labels.begin());
  }
  if (perm.size() != acc.labels.size()) return n.Error("the output repeats a letter");
  LOOM_ASSIGN_OR_RETURN(Val y, Permute(n, acc.v, perm));
  return n.SetOut(0, y);
}

}  // namespace

std::vector<OpEntry> EinsumOps() { return {{"Einsum", "einsum", 12, "mul, sum, permute, reshape, matmul", Einsum}}; }

}  // namespace loom::compiler::import::onnx
