// Lsn, and the request's read-your-writes position (postgres_lsn.hpp).
#include <charconv>
#include <string>

#include "holdfast/postgres_lsn.hpp"
#include "holdfast/window.hpp"
#include "pg_internal.hpp"

namespace holdfast::pg {
namespace {

// The position of the request whose window is `window`, on this thread.
struct Slot {
  const RetryWindow* window = nullptr;
  bool seen_open = false;  // the window was open when the slot was last used
  std::uint64_t lsn = 0;
  bool primary_only = false;
};
thread_local Slot slot;

// The current request's slot, or nullptr outside any RequestScope. A window never closes
// once open, so a slot that saw its window open and finds it closed now belongs to an
// earlier request whose window had the same address: it starts afresh.
Slot* current() noexcept {
  const RetryWindow* w = RequestScope::current_window();
  if (w == nullptr) return nullptr;
  const bool open = w->is_open();
  if (slot.window != w || (slot.seen_open && !open)) {
    slot = Slot{w, open, 0, false};
  } else if (open) {
    slot.seen_open = true;
  }
  return &slot;
}

bool parse_hex(std::string_view text, std::uint32_t& out) {
  if (text.empty() || text.size() > 8) return false;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), out, 16);
  return r.ec == std::errc() && r.ptr == text.data() + text.size();
}

}  // namespace

Result<Lsn> Lsn::parse(std::string_view text) {
  const std::size_t slash = text.find('/');
  std::uint32_t hi = 0;
  std::uint32_t lo = 0;
  if (slash == std::string_view::npos || !parse_hex(text.substr(0, slash), hi) ||
      !parse_hex(text.substr(slash + 1), lo)) {
    return Status(Code::kInvalidArgument,
                  "'" + std::string(text) + "' is not a WAL position (like 16/B374D848)");
  }
  return Lsn{(static_cast<std::uint64_t>(hi) << 32) | lo};
}

std::string Lsn::to_string() const {
  char buf[20];
  char* p = std::to_chars(buf, buf + 8, static_cast<std::uint32_t>(value >> 32), 16).ptr;
  *p++ = '/';
  p = std::to_chars(p, buf + sizeof(buf), static_cast<std::uint32_t>(value), 16).ptr;
  std::string s(buf, p);
  for (char& c : s) {
    if (c >= 'a' && c <= 'f') c = static_cast<char>(c - 'a' + 'A');
  }
  return s;
}

Lsn request_lsn() noexcept {
  const Slot* s = current();
  return Lsn{s != nullptr ? s->lsn : 0};
}

void require_lsn(Lsn lsn) noexcept {
  Slot* s = current();
  if (s != nullptr && lsn.value > s->lsn) s->lsn = lsn.value;
}

detail::RequestPosition detail::request_position() noexcept {
  const Slot* s = current();
  if (s == nullptr) return {};
  return {s->lsn, s->primary_only};
}

void detail::note_write(std::uint64_t lsn) noexcept {
  Slot* s = current();
  if (s == nullptr) return;
  if (lsn == 0) s->primary_only = true;
  if (lsn > s->lsn) s->lsn = lsn;
}

}  // namespace holdfast::pg
