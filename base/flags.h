// Command-line flags for the `loom` subcommands: one parser, one usage format.
//
//   FlagSet fs("loom run", "JOB.yaml", "Runs a job on this machine.");
//   fs.Int("nproc-per-node", &nproc, "N", "ranks on this node", 1);
//   fs.Bool("json", &json, "one JSON object on stdout");
//   fs.String("coordinator", &addr, "HOST:PORT", "the coordinator").Env("LOOM_COORDINATOR");
//   fs.Positionals(&files, "JOB.yaml", 1, 1);
//   if (std::optional<int> rc = fs.Parse(args)) return *rc;  // --help: 0, usage error: 2
//
// Forms: `--name value` and `--name=value`; booleans `--name`, `--no-name` and
// `--name=true|false` (a boolean never takes the next argument); a repeated
// flag appends each value; `--` ends the flags. `-h` / `--help` anywhere
// prints the usage, generated from the declarations, to `out` and returns 0.
// Usage errors print "<command>: <message>" and a pointer to --help to `err`
// and return 2: an unknown flag (with the nearest declared flag by edit
// distance, "did you mean --bar?"), a missing or malformed value, a number out
// of its range, too few or too many positional arguments. A flag declared with
// Env() takes the variable's value when the command line does not give it.
// Values are written to the bound variables as they are parsed; the bound
// variables keep their values where a flag is absent (the default).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace loom {

class FlagSet {
 public:
  // `command` prefixes messages ("loom run"); `synopsis` follows it in the
  // usage line ("JOB.yaml"); `about` is the paragraph under it.
  FlagSet(std::string command, std::string synopsis, std::string about = "");

  FlagSet& String(const std::string& name, std::string* out, const std::string& value_name, const std::string& help);
  FlagSet& Int(const std::string& name, int* out, const std::string& value_name, const std::string& help,
               int64_t min = std::numeric_limits<int>::min(), int64_t max = std::numeric_limits<int>::max());
  FlagSet& Int64(const std::string& name, int64_t* out, const std::string& value_name, const std::string& help,
                 int64_t min = std::numeric_limits<int64_t>::min(),
                 int64_t max = std::numeric_limits<int64_t>::max());
  FlagSet& Double(const std::string& name, double* out, const std::string& value_name, const std::string& help,
                  double min = -std::numeric_limits<double>::infinity(),
                  double max = std::numeric_limits<double>::infinity());
  FlagSet& Bool(const std::string& name, bool* out, const std::string& help);
  FlagSet& Repeated(const std::string& name, std::vector<std::string>* out, const std::string& value_name,
                    const std::string& help);
  // The last declared (repeated) flag also takes the arguments after its
  // value up to the next one starting with "--": `--input a b c`.
  FlagSet& Greedy();
  // The last declared flag falls back to environment variable `var`.
  FlagSet& Env(const std::string& var);
  // Positional arguments: between `min` and `max` of them, named `name` in
  // the usage. Without this declaration a positional argument is an error.
  FlagSet& Positionals(std::vector<std::string>* out, const std::string& name, size_t min, size_t max);
  // Where Env() variables are read (default std::getenv): tests pass a map.
  FlagSet& EnvLookup(std::function<const char*(const char*)> lookup);
  // A paragraph printed at the end of the usage.
  FlagSet& Note(const std::string& text);

  // nullopt: parsed, go on. Otherwise the exit code: 0 after --help, 2 after
  // a usage error (both already printed).
  std::optional<int> Parse(const std::vector<std::string>& args, std::ostream& out = std::cout,
                           std::ostream& err = std::cerr);

  // Whether the command line (or the flag's environment variable) set `name`.
  bool Seen(const std::string& name) const { return seen_.count(name) > 0; }
  std::string Usage() const;
  // "--name" for every declared flag, in declaration order.
  std::vector<std::string> FlagNames() const;
  // Prints "<command>: <message>" and the --help pointer to `err`; returns 2.
  int UsageError(const std::string& message, std::ostream& err = std::cerr);
  // The message of the last usage error ("" if none), for callers that
  // return a Status rather than print.
  const std::string& error() const { return error_; }

 private:
  enum class Kind { kString, kInt, kInt64, kDouble, kBool, kRepeated };
  struct Flag {
    std::string name, value_name, help, env;
    Kind kind;
    void* out;
    bool greedy = false;
    int64_t imin = 0, imax = 0;
    double dmin = 0, dmax = 0;
  };
  const Flag* Find(const std::string& name) const;
  // An error message, or "" when `value` was stored.
  std::string Set(const Flag& f, const std::string& value);
  std::string Suggest(const std::string& name) const;
  // "a positive integer", "an integer in [0, 9]": what a value must be.
  static std::string IntRange(const Flag& f);
  static std::string DoubleRange(const Flag& f);
  FlagSet& Add(Flag f);

  std::string command_, synopsis_, about_, note_;
  std::vector<Flag> flags_;
  std::vector<std::string>* positionals_ = nullptr;
  std::string positional_name_;
  size_t min_positionals_ = 0, max_positionals_ = 0;
  std::set<std::string> seen_;
  std::string error_;
  std::function<const char*(const char*)> env_ = [](const char* n) -> const char* { return std::getenv(n); };
};

// Levenshtein distance between `a` and `b`.
size_t EditDistance(const std::string& a, const std::string& b);

}  // namespace loom
