#include "base/flags.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace loom {

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

FlagSet::FlagSet(std::string command, std::string synopsis, std::string about)
    : command_(std::move(command)), synopsis_(std::move(synopsis)), about_(std::move(about)) {}

FlagSet& FlagSet::Add(Flag f) {
  flags_.push_back(std::move(f));
  return *this;
}

FlagSet& FlagSet::String(const std::string& name, std::string* out, const std::string& value_name,
                         const std::string& help) {
  return Add({name, value_name, help, "", Kind::kString, out});
}

FlagSet& FlagSet::Int(const std::string& name, int* out, const std::string& value_name, const std::string& help,
                      int64_t min, int64_t max) {
  Flag f{name, value_name, help, "", Kind::kInt, out};
  f.imin = std::max<int64_t>(min, std::numeric_limits<int>::min());
  f.imax = std::min<int64_t>(max, std::numeric_limits<int>::max());
  return Add(f);
}

FlagSet& FlagSet::Int64(const std::string& name, int64_t* out, const std::string& value_name,
                        const std::string& help, int64_t min, int64_t max) {
  Flag f{name, value_name, help, "", Kind::kInt64, out};
  f.imin = min;
  f.imax = max;
  return Add(f);
}

FlagSet& FlagSet::Double(const std::string& name, double* out, const std::string& value_name,
                         const std::string& help, double min, double max) {
  Flag f{name, value_name, help, "", Kind::kDouble, out};
  f.dmin = min;
  f.dmax = max;
  return Add(f);
}

FlagSet& FlagSet::Bool(const std::string& name, bool* out, const std::string& help) {
  return Add({name, "", help, "", Kind::kBool, out});
}

FlagSet& FlagSet::Repeated(const std::string& name, std::vector<std::string>* out, const std::string& value_name,
                           const std::string& help) {
  return Add({name, value_name, help, "", Kind::kRepeated, out});
}

FlagSet& FlagSet::Greedy() {
  if (!flags_.empty() && flags_.back().kind == Kind::kRepeated) flags_.back().greedy = true;
  return *this;
}

FlagSet& FlagSet::Env(const std::string& var) {
  if (!flags_.empty()) flags_.back().env = var;
  return *this;
}

FlagSet& FlagSet::Positionals(std::vector<std::string>* out, const std::string& name, size_t min, size_t max) {
  positionals_ = out;
  positional_name_ = name;
  min_positionals_ = min;
  max_positionals_ = max;
  return *this;
}

FlagSet& FlagSet::EnvLookup(std::function<const char*(const char*)> lookup) {
  env_ = std::move(lookup);
  return *this;
}

FlagSet& FlagSet::Note(const std::string& text) {
  note_ = text;
  return *this;
}

const FlagSet::Flag* FlagSet::Find(const std::string& name) const {
  for (const Flag& f : flags_)
    if (f.name == name) return &f;
  return nullptr;
}

std::string FlagSet::Suggest(const std::string& name) const {
  std::string best;
  size_t best_d = std::max<size_t>(2, name.size() / 3) + 1;
  for (const Flag& f : flags_) {
    for (const std::string& cand : {f.name, f.kind == Kind::kBool ? "no-" + f.name : std::string()}) {
      if (cand.empty()) continue;
      const size_t d = EditDistance(name, cand);
      if (d < best_d) best_d = d, best = cand;
    }
  }
  return best.empty() ? "" : absl::StrCat(" (did you mean --", best, "?)");
}

std::string FlagSet::IntRange(const Flag& f) {
  const bool open_top = f.imax == std::numeric_limits<int64_t>::max() ||
                        (f.kind == Kind::kInt && f.imax == std::numeric_limits<int>::max());
  const bool open_bottom = f.imin == std::numeric_limits<int64_t>::min() ||
                           (f.kind == Kind::kInt && f.imin == std::numeric_limits<int>::min());
  if (open_top && open_bottom) return "an integer";
  if (open_top && f.imin == 1) return "a positive integer";
  if (open_top && f.imin == 0) return "a non-negative integer";
  if (open_top) return absl::StrCat("an integer >= ", f.imin);
  return absl::StrCat("an integer in [", f.imin, ", ", f.imax, "]");
}

std::string FlagSet::DoubleRange(const Flag& f) {
  const bool open_top = f.dmax >= std::numeric_limits<double>::max();
  if (open_top && f.dmin == std::numeric_limits<double>::min()) return "a positive number";
  if (open_top && f.dmin == 0) return "a non-negative number";
  if (open_top && f.dmin == -std::numeric_limits<double>::infinity()) return "a number";
  if (open_top) return absl::StrCat("a number >= ", f.dmin);
  return absl::StrCat("a number in [", f.dmin, ", ", f.dmax, "]");
}

std::string FlagSet::Set(const Flag& f, const std::string& value) {
  const std::string flag = "--" + f.name;
  switch (f.kind) {
    case Kind::kString: *static_cast<std::string*>(f.out) = value; return "";
    case Kind::kRepeated: static_cast<std::vector<std::string>*>(f.out)->push_back(value); return "";
    case Kind::kBool: {
      const std::string v = absl::AsciiStrToLower(value);
      if (v == "true" || v == "1" || v == "yes") *static_cast<bool*>(f.out) = true;
      else if (v == "false" || v == "0" || v == "no") *static_cast<bool*>(f.out) = false;
      else return absl::StrCat(flag, ": expected true or false, got '", value, "'");
      return "";
    }
    case Kind::kInt:
    case Kind::kInt64: {
      int64_t n = 0;
      if (!absl::SimpleAtoi(value, &n) || n < f.imin || n > f.imax)
        return absl::StrCat(flag, ": expected ", IntRange(f), ", got '", value, "'");
      if (f.kind == Kind::kInt) *static_cast<int*>(f.out) = static_cast<int>(n);
      else *static_cast<int64_t*>(f.out) = n;
      return "";
    }
    case Kind::kDouble: {
      double d = 0;
      if (!absl::SimpleAtod(value, &d) || !std::isfinite(d) || !(d >= f.dmin && d <= f.dmax))
        return absl::StrCat(flag, ": expected ", DoubleRange(f), ", got '", value, "'");
      *static_cast<double*>(f.out) = d;
      return "";
    }
  }
  return "";
}

int FlagSet::UsageError(const std::string& message, std::ostream& err) {
  error_ = message;
  err << command_ << ": " << message << "\n(run '" << command_ << " --help' for its flags)\n";
  return 2;
}

std::optional<int> FlagSet::Parse(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  for (const std::string& a : args) {
    if (a == "--") break;
    if (a == "-h" || a == "--help") {
      out << Usage();
      return 0;
    }
  }
  std::vector<std::string> positional;
  bool flags_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (flags_done || a.size() < 2 || a[0] != '-') {
      positional.push_back(a);
      continue;
    }
    if (a == "--") {
      flags_done = true;
      continue;
    }
    if (a[1] != '-') return UsageError(absl::StrCat("unknown flag ", a, " (flags start with --)"), err);
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) value = name.substr(eq + 1), name = name.substr(0, eq);
    const Flag* f = Find(name);
    if (f == nullptr && !inline_value && name.rfind("no-", 0) == 0) {
      const Flag* b = Find(name.substr(3));
      if (b != nullptr && b->kind == Kind::kBool) {
        *static_cast<bool*>(b->out) = false;
        seen_.insert(b->name);
        continue;
      }
    }
    if (f == nullptr) return UsageError(absl::StrCat("unknown flag --", name, Suggest(name)), err);
    if (f->kind == Kind::kBool && !inline_value) {
      value = "true";
    } else if (!inline_value) {
      if (i + 1 >= args.size()) return UsageError(absl::StrCat("--", name, ": missing value"), err);
      value = args[++i];
    }
    if (std::string e = Set(*f, value); !e.empty()) return UsageError(e, err);
    while (f->greedy && i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) Set(*f, args[++i]);
    seen_.insert(f->name);
  }
  for (const Flag& f : flags_) {
    if (f.env.empty() || seen_.count(f.name)) continue;
    const char* v = env_(f.env.c_str());
    if (v == nullptr || *v == '\0') continue;
    if (std::string e = Set(f, v); !e.empty()) return UsageError(absl::StrCat(e, " (from $", f.env, ")"), err);
    seen_.insert(f.name);
  }
  if (positionals_ == nullptr && !positional.empty())
    return UsageError(absl::StrCat("unexpected argument '", positional[0], "'"), err);
  if (positionals_ != nullptr) {
    if (positional.size() < min_positionals_)
      return UsageError(absl::StrCat("missing ", positional_name_), err);
    if (positional.size() > max_positionals_)
      return UsageError(absl::StrCat("unexpected argument '", positional[max_positionals_], "'"), err);
    *positionals_ = positional;
  }
  return std::nullopt;
}

std::string FlagSet::Usage() const {
  std::ostringstream u;
  u << "usage: " << command_ << (flags_.empty() ? "" : " [flags]") << (synopsis_.empty() ? "" : " ") << synopsis_
    << "\n";
  if (!about_.empty()) u << "\n" << about_ << "\n";
  u << "\nflags:\n";
  for (const Flag& f : flags_) {
    std::string left = "--" + f.name;
    if (f.kind == Kind::kBool) left = "--[no-]" + f.name;
    else left += " " + f.value_name;
    u << "  " << left;
    u << std::string(left.size() < 28 ? 28 - left.size() : 1, ' ') << f.help;
    if (f.kind == Kind::kRepeated) u << " (repeatable)";
    if (!f.env.empty()) u << " [env " << f.env << "]";
    u << "\n";
  }
  u << "  --help                      this text\n";
  if (!note_.empty()) u << "\n" << note_ << "\n";
  return u.str();
}

std::vector<std::string> FlagSet::FlagNames() const {
  std::vector<std::string> names;
  for (const Flag& f : flags_) names.push_back("--" + f.name);
  return names;
}

}  // namespace loom
