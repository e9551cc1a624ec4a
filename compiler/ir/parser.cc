// Recursive-descent parser for the IR text form (grammar in text.h).
#include <cctype>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "compiler/ir/text.h"
#include "compiler/ir/verifier.h"

namespace loom::compiler::ir {
namespace {

enum class Tok { kEnd, kIdent, kValue, kGlobal, kNumber, kString, kPunct };

struct Token {
  Tok kind = Tok::kEnd;
  std::string text;  // ident / name without sigil / number / string body / punctuation
  int line = 1, col = 1;
};

class Lexer {
 public:
  explicit Lexer(absl::string_view s) : s_(s) {}

  absl::StatusOr<std::vector<Token>> Run() {
    std::vector<Token> toks;
    while (true) {
      SkipSpace();
      Token t;
      t.line = line_;
      t.col = col_;
      if (pos_ >= s_.size()) {
        toks.push_back(t);
        return toks;
      }
      char c = s_[pos_];
      if (c == '%' || c == '@') {
        Advance();
        if (c == '@' && Peek() == '"') {  // placement: @"..."
          t.kind = Tok::kPunct;
          t.text = "@";
          toks.push_back(t);
          continue;
        }
        std::string name;
        if (c == '%' && Peek() == '"') {  // quoted name: %"onnx::Add_3"
          Advance();
          while (pos_ < s_.size() && s_[pos_] != '"' && s_[pos_] != '\n') name += Advance();
          if (Peek() != '"') return Error(t, "unterminated quoted name");
          Advance();
        } else {
          name = Word();
        }
        if (name.empty()) return Error(t, absl::StrCat("expected a name after '", std::string(1, c), "'"));
        t.kind = c == '%' ? Tok::kValue : Tok::kGlobal;
        t.text = name;
      } else if (c == '"') {
        Advance();
        std::string body;
        while (pos_ < s_.size() && s_[pos_] != '"' && s_[pos_] != '\n') body += Advance();
        if (Peek() != '"') return Error(t, "unterminated string");
        Advance();
        t.kind = Tok::kString;
        t.text = body;
      } else if (std::isdigit(static_cast<unsigned char>(c)) ||
                 (c == '-' && pos_ + 1 < s_.size() &&
                  (std::isalnum(static_cast<unsigned char>(s_[pos_ + 1])) || s_[pos_ + 1] == '.'))) {
        std::string num(1, Advance());
        while (pos_ < s_.size()) {
          char d = s_[pos_];
          bool exp_sign = (d == '+' || d == '-') && !num.empty() && (num.back() == 'e' || num.back() == 'E');
          if (std::isalnum(static_cast<unsigned char>(d)) || d == '.' || exp_sign) num += Advance();
          else break;
        }
        t.kind = Tok::kNumber;
        t.text = num;
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        t.kind = Tok::kIdent;
        t.text = Word();
      } else if (c == '-' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '>') {
        Advance();
        Advance();
        t.kind = Tok::kPunct;
        t.text = "->";
      } else if (std::string("(){}[],:=").find(c) != std::string::npos) {
        Advance();
        t.kind = Tok::kPunct;
        t.text = std::string(1, c);
      } else {
        return Error(t, absl::StrCat("unexpected character '", std::string(1, c), "'"));
      }
      toks.push_back(std::move(t));
    }
  }

 private:
  static absl::Status Error(const Token& t, absl::string_view msg) {
    return absl::InvalidArgumentError(absl::StrCat("line ", t.line, ", column ", t.col, ": ", msg));
  }
  char Peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  char Advance() {
    char c = s_[pos_++];
    if (c == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    return c;
  }
  std::string Word() {
    std::string w;
    while (pos_ < s_.size() &&
           (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_' || s_[pos_] == '.'))
      w += Advance();
    return w;
  }
  void SkipSpace() {
    while (pos_ < s_.size()) {
      if (std::isspace(static_cast<unsigned char>(s_[pos_]))) {
        Advance();
      } else if (s_[pos_] == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') Advance();
      } else {
        break;
      }
    }
  }

  absl::string_view s_;
  size_t pos_ = 0;
  int line_ = 1, col_ = 1;
};

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : toks_(std::move(toks)) {}

  absl::StatusOr<Graph> ParseTop() {
    LOOM_ASSIGN_OR_RETURN(Graph g, ParseGraphBody());
    if (Cur().kind != Tok::kEnd) return Error(Cur(), "unexpected text after the graph");
    return g;
  }

 private:
  const Token& Cur() const { return toks_[i_]; }
  const Token& Next() { return toks_[i_ < toks_.size() - 1 ? i_++ : i_]; }
  static absl::Status Error(const Token& t, absl::string_view msg) {
    std::string got = t.kind == Tok::kEnd ? "end of input" : absl::StrCat("'", t.text, "'");
    return absl::InvalidArgumentError(
        absl::StrCat("line ", t.line, ", column ", t.col, ": ", msg, " (at ", got, ")"));
  }
  bool IsPunct(absl::string_view p) const { return Cur().kind == Tok::kPunct && Cur().text == p; }
  bool IsIdent(absl::string_view w) const { return Cur().kind == Tok::kIdent && Cur().text == w; }
  absl::Status Expect(absl::string_view p) {
    if (!IsPunct(p)) return Error(Cur(), absl::StrCat("expected '", p, "'"));
    Next();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectKind(Tok kind, absl::string_view what) {
    if (Cur().kind != kind) return Error(Cur(), absl::StrCat("expected ", what));
    return Next().text;
  }

  absl::StatusOr<int64_t> ParseInt() {
    const Token& t = Cur();
    int64_t v;
    if (t.kind != Tok::kNumber || !absl::SimpleAtoi(t.text, &v)) return Error(t, "expected an integer");
    Next();
    return v;
  }

  // type := DTYPE '[' dims ']' ['@' STRING]
  absl::StatusOr<Value> ParseType() {
    const Token& t = Cur();
    if (t.kind != Tok::kIdent) return Error(t, "expected a type such as f32[2, 3]");
    auto dt = ParseDType(t.text);
    if (!dt.ok()) return Error(t, absl::StrCat("unknown dtype '", t.text, "'"));
    Next();
    Value v;
    v.meta.dtype = *dt;
    LOOM_RETURN_IF_ERROR(Expect("["));
    while (!IsPunct("]")) {
      if (!v.meta.shape.empty()) LOOM_RETURN_IF_ERROR(Expect(","));
      const Token& d = Cur();
      LOOM_ASSIGN_OR_RETURN(int64_t n, ParseInt());
      if (n < 0) return Error(d, "negative dimension");
      if (n > 0 && NumElements(v.meta.shape) > (int64_t{1} << 48) / n) return Error(d, "tensor too large");
      v.meta.shape.push_back(n);
    }
    Next();
    if (IsPunct("@")) {
      Next();
      LOOM_ASSIGN_OR_RETURN(v.placement, ExpectKind(Tok::kString, "a placement string"));
    }
    return v;
  }

  absl::StatusOr<kernels::AttrValue> ParseAttrValue() {
    const Token& t = Cur();
    if (t.kind == Tok::kString) return kernels::AttrValue(Next().text);
    if (t.kind == Tok::kIdent) {
      if (t.text == "true" || t.text == "false") return kernels::AttrValue(Next().text == "true");
      double d;
      if (absl::SimpleAtod(t.text, &d)) {  // inf, nan
        Next();
        return kernels::AttrValue(d);
      }
      return Error(t, "expected an attribute value");
    }
    if (t.kind == Tok::kNumber) {
      bool is_float = t.text.find_first_of(".eEn") != std::string::npos;
      if (!is_float) {
        int64_t v;
        if (!absl::SimpleAtoi(t.text, &v)) return Error(t, "bad integer");
        Next();
        return kernels::AttrValue(v);
      }
      double d;
      if (!absl::SimpleAtod(t.text, &d)) return Error(t, "bad number");
      Next();
      return kernels::AttrValue(d);
    }
    if (IsPunct("[")) {
      Next();
      std::vector<int64_t> v;
      while (!IsPunct("]")) {
        if (!v.empty()) LOOM_RETURN_IF_ERROR(Expect(","));
        LOOM_ASSIGN_OR_RETURN(int64_t x, ParseInt());
        v.push_back(x);
      }
      Next();
      return kernels::AttrValue(std::move(v));
    }
    return Error(t, "expected an attribute value");
  }

  absl::StatusOr<Attrs> ParseAttrs() {
    Attrs attrs;
    LOOM_RETURN_IF_ERROR(Expect("{"));
    bool first = true;
    while (!IsPunct("}")) {
      if (!first) LOOM_RETURN_IF_ERROR(Expect(","));
      first = false;
      const Token& key = Cur();
      LOOM_ASSIGN_OR_RETURN(std::string k, ExpectKind(Tok::kIdent, "an attribute name"));
      if (attrs.Has(k)) return Error(key, absl::StrCat("duplicate attribute '", k, "'"));
      LOOM_RETURN_IF_ERROR(Expect("="));
      LOOM_ASSIGN_OR_RETURN(kernels::AttrValue v, ParseAttrValue());
      attrs.Set(k, std::move(v));
    }
    Next();
    return attrs;
  }

  absl::StatusOr<int> Lookup(const std::map<std::string, int>& names, const Token& t) {
    auto it = names.find(t.text);
    if (it == names.end()) return Error(t, absl::StrCat("undefined value %", t.text));
    return it->second;
  }

  absl::StatusOr<Graph> ParseGraphBody() {
    if (!IsIdent("graph")) return Error(Cur(), "expected 'graph'");
    if (++depth_ > kMaxDepth) return Error(Cur(), "fused graphs nested too deeply");
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    Next();
    LOOM_ASSIGN_OR_RETURN(std::string gname, ExpectKind(Tok::kGlobal, "@name"));
    Graph g(gname);
    std::map<std::string, int> names;
    LOOM_RETURN_IF_ERROR(Expect("("));
    while (!IsPunct(")")) {
      if (!g.inputs().empty()) LOOM_RETURN_IF_ERROR(Expect(","));
      const Token& nt = Cur();
      LOOM_ASSIGN_OR_RETURN(std::string name, ExpectKind(Tok::kValue, "an input %name"));
      if (names.count(name)) return Error(nt, absl::StrCat("duplicate name %", name));
      LOOM_RETURN_IF_ERROR(Expect(":"));
      LOOM_ASSIGN_OR_RETURN(Value v, ParseType());
      InputKind kind = InputKind::kInput;
      if (IsIdent("param")) kind = InputKind::kParam;
      else if (IsIdent("state")) kind = InputKind::kState;
      else if (IsIdent("const")) kind = InputKind::kConst;
      if (kind != InputKind::kInput || IsIdent("input")) Next();
      int id = g.AddInput(name, v.meta, kind);
      g.value(id).placement = v.placement;
      names[name] = id;
    }
    Next();
    LOOM_RETURN_IF_ERROR(Expect("{"));
    while (!IsIdent("return")) {
      LOOM_RETURN_IF_ERROR(ParseNode(g, names));
    }
    Next();
    bool first = true;
    while (!IsPunct("}")) {
      if (!first) LOOM_RETURN_IF_ERROR(Expect(","));
      first = false;
      const Token& vt = Cur();
      if (vt.kind != Tok::kValue) return Error(vt, "expected an output %name");
      Next();
      LOOM_ASSIGN_OR_RETURN(int v, Lookup(names, vt));
      int updates = -1;
      if (IsPunct("->")) {
        Next();
        const Token& it = Cur();
        LOOM_ASSIGN_OR_RETURN(std::string in, ExpectKind(Tok::kValue, "an input %name"));
        updates = g.FindInput(in);
        if (updates < 0) return Error(it, absl::StrCat("%", in, " is not an input of the graph"));
        if (!(g.meta(g.inputs()[updates].value) == g.meta(v)))
          return Error(it, absl::StrCat("output type ", g.meta(v).ToString(), " does not match %", in, "'s ",
                                        g.meta(g.inputs()[updates].value).ToString()));
      }
      g.AddOutput(v, updates);
    }
    Next();
    return g;
  }

  absl::Status ParseNode(Graph& g, std::map<std::string, int>& names) {
    const Token start = Cur();
    std::vector<Token> outs;
    while (Cur().kind == Tok::kValue) {
      outs.push_back(Next());
      if (!IsPunct(",")) break;
      Next();
    }
    if (outs.empty() && !IsPunct("=")) return Error(Cur(), "expected '%name = op(...)' or 'return'");
    LOOM_RETURN_IF_ERROR(Expect("="));
    const Token op_tok = Cur();
    LOOM_ASSIGN_OR_RETURN(std::string op, ExpectKind(Tok::kIdent, "an op name"));
    Node n;
    n.op = op;
    LOOM_RETURN_IF_ERROR(Expect("("));
    while (!IsPunct(")")) {
      if (!n.inputs.empty()) LOOM_RETURN_IF_ERROR(Expect(","));
      const Token& at = Cur();
      if (at.kind != Tok::kValue) return Error(at, "expected an argument %name");
      Next();
      LOOM_ASSIGN_OR_RETURN(int v, Lookup(names, at));
      n.inputs.push_back(v);
    }
    Next();
    if (IsPunct("{")) {
      LOOM_ASSIGN_OR_RETURN(n.attrs, ParseAttrs());
    }
    if (IsIdent("compute")) {
      Next();
      LOOM_RETURN_IF_ERROR(Expect("="));
      const Token& dt = Cur();
      LOOM_ASSIGN_OR_RETURN(std::string d, ExpectKind(Tok::kIdent, "a dtype"));
      auto parsed = ParseDType(d);
      if (!parsed.ok()) return Error(dt, absl::StrCat("unknown dtype '", d, "'"));
      n.compute_dtype = *parsed;
    }
    LOOM_RETURN_IF_ERROR(Expect(":"));
    std::vector<Value> types;
    while (true) {
      LOOM_ASSIGN_OR_RETURN(Value v, ParseType());
      types.push_back(std::move(v));
      if (!IsPunct(",")) break;
      Next();
    }
    if (IsIdent("graph")) {
      LOOM_ASSIGN_OR_RETURN(Graph sub, ParseGraphBody());
      n.subgraph = std::make_shared<Graph>(std::move(sub));
    }
    if (types.size() != outs.size())
      return Error(start, absl::StrCat(outs.size(), " result names but ", types.size(), " result types"));
    // Check against inference here so the error carries the node's position.
    if (n.op != kFusedOp && kernels::OpRegistry::Global().Find(n.op) == nullptr)
      return Error(op_tok, absl::StrCat("unknown op '", n.op, "'"));
    auto inferred = InferNode(g, n);
    if (!inferred.ok()) return Error(op_tok, inferred.status().message());
    if (inferred->size() != types.size())
      return Error(start, absl::StrCat(n.op, " has ", inferred->size(), " outputs, ", types.size(), " are written"));
    std::vector<TensorMeta> metas;
    for (size_t k = 0; k < types.size(); ++k) {
      if (!(types[k].meta == (*inferred)[k]))
        return Error(start, absl::StrCat("result ", k, " of ", n.op, " is written ", types[k].meta.ToString(),
                                         " but inference gives ", (*inferred)[k].ToString()));
      metas.push_back(types[k].meta);
    }
    int idx = g.AddNodeUnchecked(std::move(n), metas);
    for (size_t k = 0; k < outs.size(); ++k) {
      if (names.count(outs[k].text)) return Error(outs[k], absl::StrCat("duplicate name %", outs[k].text));
      int v = g.nodes()[idx].outputs[k];
      names[outs[k].text] = v;
      g.value(v).placement = types[k].placement;
    }
    return absl::OkStatus();
  }

  static constexpr int kMaxDepth = 16;
  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

absl::StatusOr<Graph> ParseGraph(absl::string_view text) {
  LOOM_ASSIGN_OR_RETURN(std::vector<Token> toks, Lexer(text).Run());
  LOOM_ASSIGN_OR_RETURN(Graph g, Parser(std::move(toks)).ParseTop());
  LOOM_RETURN_IF_ERROR(Verify(g));
  return g;
}

}  // namespace loom::compiler::ir
