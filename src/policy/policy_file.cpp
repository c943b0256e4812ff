// Policy files (policy_file.hpp): JSON to Shield::Options, every error with its JSON Pointer.
#include "holdfast/policy_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "holdfast/core/backoff.hpp"
#include "holdfast/core/circuit_breaker.hpp"
#include "holdfast/core/concurrency_limit.hpp"
#include "holdfast/core/retry.hpp"
#include "holdfast/core/retry_throttle.hpp"

namespace holdfast {
namespace {

using nlohmann::json;

// What is wrong, and where (a JSON Pointer; "" for the whole document). Thrown inside the
// parser only; parse_policy() turns it into a Status.
struct BadField {
  std::string pointer;
  std::string what;
};

[[noreturn]] void bad(std::string pointer, std::string what) {
  throw BadField{std::move(pointer), std::move(what)};
}

std::string type_name(const json& v) {
  return std::string(v.type_name());
}

// "250ms", "6s", "1.5s": a number and a unit, ms or s. Nothing else.
Duration duration_of(const json& v, const std::string& at) {
  static constexpr const char* kRule = "a duration is a string with a unit: \"250ms\" or \"6s\"";
  if (!v.is_string()) bad(at, "got a " + type_name(v) + "; " + kRule);
  const std::string& text = v.get_ref<const std::string&>();
  double scale = 0.0;
  std::string_view number(text);
  if (number.size() > 2 && number.substr(number.size() - 2) == "ms") {
    scale = 1e6;
    number.remove_suffix(2);
  } else if (number.size() > 1 && number.back() == 's') {
    scale = 1e9;
    number.remove_suffix(1);
  } else {
    bad(at, "\"" + text + "\" has no unit; " + kRule);
  }
  double value = 0.0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc() || end != number.data() + number.size() || !std::isfinite(value)) {
    bad(at, "\"" + text + "\" is not a number of ms or s; " + kRule);
  }
  const double ns = value * scale;
  // Up to a year: longer is a mistake, and it keeps every sum of durations in range.
  if (std::abs(ns) > 365.0 * 86400.0 * 1e9) bad(at, "\"" + text + "\" is longer than a year");
  return Duration(static_cast<Duration::rep>(std::llround(ns)));
}

int integer_of(const json& v, const std::string& at) {
  if (!v.is_number_integer()) bad(at, "must be a whole number, got " + v.dump());
  constexpr auto kMax = std::numeric_limits<int>::max();
  constexpr auto kMin = std::numeric_limits<int>::min();
  const bool in_range = v.is_number_unsigned()
                            ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(kMax)
                            : v.get<std::int64_t>() >= kMin && v.get<std::int64_t>() <= kMax;
  if (!in_range) bad(at, v.dump() + " is out of range (at most 2147483647)");
  return static_cast<int>(v.get<std::int64_t>());
}

double number_of(const json& v, const std::string& at) {
  if (!v.is_number()) bad(at, "must be a number, got " + v.dump());
  return v.get<double>();
}

// One JSON object of the document: refuses keys it does not know, then hands each known key
// that is present to its reader.
class Section {
 public:
  Section(const json& j, std::string pointer, std::initializer_list<const char*> keys)
      : j_(j), pointer_(std::move(pointer)) {
    if (!j.is_object()) bad(pointer_, "must be an object, got a " + type_name(j));
    for (const auto& [key, value] : j.items()) {
      bool known = false;
      for (const char* k : keys)
        known = known || key == k;
      if (!known) {
        std::string list;
        for (const char* k : keys)
          list += (list.empty() ? "" : ", ") + std::string(k);
        bad(pointer_ + "/" + key, "unknown key (known here: " + list + ")");
      }
    }
  }

  [[nodiscard]] const json* find(const char* key) const {
    const auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  [[nodiscard]] std::string at(const char* key) const { return pointer_ + "/" + key; }
  [[nodiscard]] const std::string& pointer() const { return pointer_; }

  void read(const char* key, Duration& out) const {
    if (const json* v = find(key)) out = duration_of(*v, at(key));
  }
  void read(const char* key, int& out) const {
    if (const json* v = find(key)) out = integer_of(*v, at(key));
  }
  void read(const char* key, double& out) const {
    if (const json* v = find(key)) out = number_of(*v, at(key));
  }

 private:
  const json& j_;
  std::string pointer_;
};

// Runs `apply` (a library setter or constructor); its std::invalid_argument becomes an error
// at `at`.
template <class F>
void validated(const std::string& at, F&& apply) {
  try {
    apply();
  } catch (const std::invalid_argument& e) {
    bad(at, e.what());
  }
}

// An options struct's constructor names the field: "CircuitBreaker::Options::open_max must
// be >= open_initial" becomes "/breaker/open_max: must be >= open_initial".
template <class Checked, class Options>
void check_options(const Options& options, const std::string& section) {
  try {
    const Checked checked(options);
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    const std::size_t colons = what.find("Options::");
    if (colons == std::string::npos) bad(section, what);
    const std::size_t start = colons + 9;
    const std::size_t space = what.find(' ', start);
    if (space == std::string::npos) bad(section, what);
    bad(section + "/" + what.substr(start, space - start), what.substr(space + 1));
  }
}

Jitter jitter_of(const Section& s, Jitter fallback) {
  const json* kind = s.find("jitter");
  const json* ratio = s.find("jitter_ratio");
  std::string name = fallback.kind() == Jitter::Kind::kFull ? "full" : "proportional";
  if (kind != nullptr) {
    if (!kind->is_string()) bad(s.at("jitter"), "must be a string, got " + kind->dump());
    name = kind->get<std::string>();
  }
  if (ratio != nullptr && name != "proportional") {
    bad(s.at("jitter_ratio"), "applies only to \"jitter\": \"proportional\"");
  }
  if (name == "proportional") {
    double r = 0.5;
    if (ratio != nullptr) r = number_of(*ratio, s.at("jitter_ratio"));
    Jitter j = Jitter::none();
    validated(s.at(ratio != nullptr ? "jitter_ratio" : "jitter"),
              [&] { j = Jitter::proportional(r); });
    return j;
  }
  if (name == "none") return Jitter::none();
  if (name == "full") return Jitter::full();
  if (name == "equal") return Jitter::equal();
  if (name == "decorrelated") return Jitter::decorrelated();
  bad(s.at("jitter"), "\"" + name + "\" is not none, proportional, full, equal or decorrelated");
}

Backoff backoff_of(const json& j, const std::string& pointer) {
  const Section s(j, pointer, {"steps", "base", "factor", "cap", "jitter", "jitter_ratio"});
  const json* steps = s.find("steps");
  const bool exponential = s.find("base") || s.find("cap") || s.find("factor");
  if ((steps != nullptr) == exponential) {
    bad(pointer, "give either \"steps\" (a list of delays) or \"base\" and \"cap\" (exponential)");
  }
  Backoff b;
  if (steps != nullptr) {
    if (!steps->is_array()) bad(s.at("steps"), "must be a list of durations");
    std::vector<Duration> delays;
    for (std::size_t i = 0; i < steps->size(); ++i)
      delays.push_back(duration_of((*steps)[i], s.at("steps") + "/" + std::to_string(i)));
    const Jitter jitter = jitter_of(s, Jitter::proportional(0.5));
    validated(s.at("steps"), [&] { b = Backoff::steps(std::move(delays), jitter); });
    return b;
  }
  if (!s.find("base") || !s.find("cap")) {
    bad(s.at(s.find("base") ? "cap" : "base"), "an exponential backoff needs \"base\" and \"cap\"");
  }
  Duration base{};
  Duration cap{};
  double factor = 2.0;
  s.read("base", base);
  s.read("cap", cap);
  s.read("factor", factor);
  const Jitter jitter = jitter_of(s, Jitter::full());
  validated(pointer, [&] { b = Backoff::exponential(base, factor, cap, jitter); });
  return b;
}

void read_retry(const json& j, const std::string& pointer, RetryPolicy& p) {
  const Section s(j, pointer, {"max_attempts", "backoff", "window", "last_attempt_time"});
  if (const json* v = s.find("max_attempts")) {
    const int n = integer_of(*v, s.at("max_attempts"));
    validated(s.at("max_attempts"), [&] { p.max_attempts(n); });
  }
  if (const json* v = s.find("backoff")) p.backoff(backoff_of(*v, s.at("backoff")));
  if (const json* v = s.find("window")) {
    const Duration d = duration_of(*v, s.at("window"));
    validated(s.at("window"), [&] { p.window(d); });
  }
  if (const json* v = s.find("last_attempt_time")) {
    const Duration d = duration_of(*v, s.at("last_attempt_time"));
    validated(s.at("last_attempt_time"), [&] { p.last_attempt_time(d); });
  }
}

void read_breaker(const json& j, CircuitBreaker::Options& o) {
  const Section s(
      j, "/breaker",
      {"failure_ratio", "minimum_calls", "window", "window_buckets", "consecutive_failures",
       "busy_consecutive_failures", "slow_call_threshold", "open_initial", "open_max",
       "half_open_probes", "probe_successes_to_close", "probe_lease"});
  s.read("failure_ratio", o.failure_ratio);
  s.read("minimum_calls", o.minimum_calls);
  s.read("window", o.window);
  s.read("window_buckets", o.window_buckets);
  s.read("consecutive_failures", o.consecutive_failures);
  s.read("busy_consecutive_failures", o.busy_consecutive_failures);
  s.read("slow_call_threshold", o.slow_call_threshold);
  s.read("open_initial", o.open_initial);
  s.read("open_max", o.open_max);
  s.read("half_open_probes", o.half_open_probes);
  s.read("probe_successes_to_close", o.probe_successes_to_close);
  s.read("probe_lease", o.probe_lease);
  check_options<CircuitBreaker>(o, s.pointer());
}

void read_throttle(const json& j, RetryThrottle::Options& o) {
  const Section s(j, "/throttle", {"max_tokens", "token_ratio", "floor_per_second"});
  s.read("max_tokens", o.max_tokens);
  s.read("token_ratio", o.token_ratio);
  s.read("floor_per_second", o.floor_per_second);
  check_options<RetryThrottle>(o, s.pointer());
}

void read_limit(const json& j, ConcurrencyLimit::Options& o) {
  const Section s(j, "/limit",
                  {"initial", "min", "max", "tolerance", "smoothing", "short_samples",
                   "long_samples", "retry_share"});
  s.read("initial", o.initial);
  s.read("min", o.min);
  s.read("max", o.max);
  s.read("tolerance", o.tolerance);
  s.read("smoothing", o.smoothing);
  s.read("short_samples", o.short_samples);
  s.read("long_samples", o.long_samples);
  s.read("retry_share", o.retry_share);
  check_options<ConcurrencyLimit>(o, s.pointer());
}

// "priorities": { "payments.create": "critical", "logs.insert": "background" }: the class of
// the operations with these labels (Shield::Options::priorities).
void read_priorities(const json& j, std::map<std::string, Priority, std::less<>>& out) {
  static constexpr const char* kPointer = "/priorities";
  if (!j.is_object()) {
    bad(kPointer, "must be an object of operation labels and classes, got a " + type_name(j));
  }
  for (const auto& [label, value] : j.items()) {
    const std::string at = std::string(kPointer) + "/" + label;
    if (label.empty()) bad(at, "an operation label must not be empty");
    Priority p = Priority::kNormal;
    if (!value.is_string() || !parse_priority(value.get<std::string>(), p)) {
      bad(at, "must be \"critical\", \"normal\" or \"background\", got " + value.dump());
    }
    out[label] = p;
  }
}

Shield::Options options_of(const json& doc) {
  const Section s(doc, "",
                  {"reads", "writes", "breaker", "throttle", "limit", "queue_wait", "probe_wait",
                   "priorities"});
  Shield::Options o;
  if (const json* v = s.find("reads")) read_retry(*v, "/reads", o.reads);
  if (const json* v = s.find("writes")) read_retry(*v, "/writes", o.writes);
  if (const json* v = s.find("breaker")) read_breaker(*v, o.breaker);
  if (const json* v = s.find("throttle")) read_throttle(*v, o.throttle);
  if (const json* v = s.find("limit")) read_limit(*v, o.limit);
  s.read("queue_wait", o.queue_wait);
  s.read("probe_wait", o.probe_wait);
  if (const json* v = s.find("priorities")) read_priorities(*v, o.priorities);
  if (o.queue_wait < Duration::zero()) bad("/queue_wait", "must not be negative");
  if (o.probe_wait < Duration::zero()) bad("/probe_wait", "must not be negative");
  return o;
}

// Where the parser is in the document, as a JSON Pointer, kept up by the parser's callback,
// so that an error the parser itself raises (a number out of range such as 1e400) can name
// its field too.
class ParsePosition {
 public:
  bool on(nlohmann::json::parse_event_t event, const json& parsed) {
    using E = nlohmann::json::parse_event_t;
    switch (event) {
      case E::object_start:
        frames_.push_back(Frame{false, {}, 0});
        break;
      case E::array_start:
        frames_.push_back(Frame{true, {}, 0});
        break;
      case E::key:
        if (!frames_.empty() && parsed.is_string()) frames_.back().key = parsed.get<std::string>();
        break;
      case E::object_end:
      case E::array_end:
        if (!frames_.empty()) frames_.pop_back();
        element_done();
        break;
      case E::value:
        element_done();
        break;
    }
    return true;
  }

  // The pointer of the value being parsed ("" at the top).
  [[nodiscard]] std::string pointer() const {
    std::string out;
    for (const Frame& f : frames_) {
      out += '/';
      if (f.array) {
        out += std::to_string(f.count);
        continue;
      }
      for (const char c : f.key) {  // RFC 6901: "~" is "~0", "/" is "~1"
        if (c == '~') {
          out += "~0";
        } else if (c == '/') {
          out += "~1";
        } else {
          out += c;
        }
      }
    }
    return out;
  }

 private:
  struct Frame {
    bool array;
    std::string key;    // an object's latest key
    std::size_t count;  // an array's values so far: the index of the one being parsed
  };
  void element_done() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().count;
  }
  std::vector<Frame> frames_;
};

// nlohmann's "[json.exception.parse_error.101] parse error at ..." without its tag.
std::string without_tag(std::string what) {
  if (what.rfind("[json.exception.", 0) == 0) {
    if (const std::size_t p = what.find("] "); p != std::string::npos) what.erase(0, p + 2);
  }
  return what;
}

Result<Shield::Options> parse_document(std::string_view text, std::string_view source) {
  json doc;
  ParsePosition position;
  try {
    doc = json::parse(text.begin(), text.end(),
                      [&position](int, json::parse_event_t event, json& parsed) {
                        return position.on(event, parsed);
                      });
  } catch (const json::parse_error& e) {
    // e.g. "parse error at line 3, column 5: ...".
    return Status(Code::kInvalidArgument,
                  std::string(source) + ": not JSON: " + without_tag(e.what()));
  } catch (const json::exception& e) {
    // Valid JSON the parser cannot hold, such as a number beyond a double (1e400).
    const std::string at = position.pointer();
    return Status(Code::kInvalidArgument, std::string(source) + ": " +
                                              (at.empty() ? std::string("the document") : at) +
                                              ": " + without_tag(e.what()));
  }
  try {
    return options_of(doc);
  } catch (const BadField& b) {
    const std::string where = b.pointer.empty() ? std::string("the document") : b.pointer;
    return Status(Code::kInvalidArgument, std::string(source) + ": " + where + ": " + b.what);
  }
}

// What load_policy() refuses to open: anything but a regular file (a FIFO or a terminal
// would block the reader, a device may never end). "" for a regular file.
std::string not_regular(mode_t mode) {
  if (S_ISREG(mode)) return {};
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

Status refused_kind(const std::string& path, const std::string& kind) {
  return Status(Code::kInvalidArgument,
                path + ": not a regular file (" + kind + "); a policy file must be one");
}

Result<Shield::Options> load_file(const std::string& path) {
  // A policy is a few hundred bytes: a name that points at something endless (/dev/zero)
  // or huge must be refused, not read into memory.
  constexpr std::size_t kMaxBytes = std::size_t{1} << 20;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Status(Code::kNotFound, path + ": cannot open the policy file: " + std::strerror(errno));
  }
  if (std::string kind = not_regular(st.st_mode); !kind.empty()) return refused_kind(path, kind);
  // O_NONBLOCK: should the name have become a FIFO since the stat, opening it does not wait
  // for a writer; the fstat below refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    return Status(Code::kNotFound, path + ": cannot open the policy file: " + std::strerror(errno));
  }
  struct Closer {
    int handle;
    ~Closer() { ::close(handle); }
  } closer{fd};
  if (::fstat(fd, &st) != 0) {
    return Status(Code::kNotFound, path + ": cannot read the policy file");
  }
  if (std::string kind = not_regular(st.st_mode); !kind.empty()) return refused_kind(path, kind);
  std::string text(kMaxBytes + 1, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return Status(Code::kNotFound,
                    path + ": cannot read the policy file: " + std::strerror(errno));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  text.resize(got);
  if (text.size() > kMaxBytes) {
    return Status(Code::kInvalidArgument, path + ": the policy file is larger than 1 MiB");
  }
  return parse_document(text, path);
}

}  // namespace

// Neither function lets an exception out (an allocation that fails, a library setter that
// throws something unexpected): the caller gets a Status either way.
Result<Shield::Options> parse_policy(std::string_view text, std::string_view source) {
  try {
    return parse_document(text, source);
  } catch (const std::exception& e) {
    return Status(Code::kInternal, std::string(source) + ": cannot parse: " + e.what());
  } catch (...) {
    return Status(Code::kInternal, std::string(source) + ": cannot parse");
  }
}

Result<Shield::Options> load_policy(const std::string& path) {
  try {
    return load_file(path);
  } catch (const std::exception& e) {
    return Status(Code::kInternal, path + ": cannot load the policy file: " + e.what());
  } catch (...) {
    return Status(Code::kInternal, path + ": cannot load the policy file");
  }
}

std::optional<std::string> policy_path_from_environment() {
  const char* path = std::getenv(kPolicyEnvironmentVariable);  // NOLINT(concurrency-mt-unsafe)
  if (path == nullptr || *path == '\0') return std::nullopt;
  return std::string(path);
}

}  // namespace holdfast
