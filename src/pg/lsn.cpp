// Lsn, and the request's read-your-writes position (pg/lsn.hpp).
#include <charconv>
#include <string>

#include "holdfast/core/window.hpp"
#include "holdfast/pg/lsn.hpp"
#include "pg_internal.hpp"

namespace holdfast::pg {
namespace {

// The position of the request whose window is `window`, on this thread, for a RequestScope
// made without a RequestContext (a context carries its request's position itself).
struct Slot {
  const RetryWindow* window = nullptr;
  bool seen_open = false;  // the window was open when the slot was last used
  WritePosition position;
};
thread_local Slot slot;

// The current request's slot, or nullptr outside any RequestScope. A window never closes
// once open, so a slot that saw its window open and finds it closed now belongs to an
// earlier request whose window had the same address: it starts afresh.
Slot* current_slot() noexcept {
  const RetryWindow* w = RequestScope::current_window();
  if (w == nullptr) return nullptr;
  const bool open = w->is_open();
  if (slot.window != w || (slot.seen_open && !open)) {
    slot = Slot{w, open, {}};
  } else if (open) {
    slot.seen_open = true;
  }
  return &slot;
}

// The current request's position: its context's, else its thread's slot; none outside any
// RequestScope.
WritePosition current_position() noexcept {
  if (const RequestContext* context = RequestScope::current_context()) return context->position();
  const Slot* s = current_slot();
  return s != nullptr ? s->position : WritePosition{};
}

// The current request's context, or else its slot (both null outside any RequestScope).
struct Current {
  const RequestContext* context = RequestScope::current_context();
  Slot* slot = context == nullptr ? current_slot() : nullptr;
};

bool parse_hex(std::string_view text, std::uint32_t& out) {
  if (text.empty() || text.size() > 8) return false;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), out, 16);
  return r.ec == std::errc() && r.ptr == text.data() + text.size();
}

}  // namespace

Result<Lsn> Lsn::parse(std::string_view text) {
  const auto bad = [&] {
    return Status(Code::kInvalidArgument, "'" + std::string(text) +
                                              "' is not a WAL position (like 16/B374D848 or, "
                                              "with its timeline, 3:16/B374D848)");
  };
  std::string_view rest = text;
  std::uint32_t timeline = 0;
  if (const std::size_t colon = rest.find(':'); colon != std::string_view::npos) {
    const std::string_view t = rest.substr(0, colon);
    const auto r = std::from_chars(t.data(), t.data() + t.size(), timeline, 10);
    if (t.empty() || t.size() > 10 || r.ec != std::errc() || r.ptr != t.data() + t.size() ||
        timeline == 0) {
      return bad();
    }
    rest.remove_prefix(colon + 1);
  }
  const std::size_t slash = rest.find('/');
  std::uint32_t hi = 0;
  std::uint32_t lo = 0;
  if (slash == std::string_view::npos || !parse_hex(rest.substr(0, slash), hi) ||
      !parse_hex(rest.substr(slash + 1), lo)) {
    return bad();
  }
  return Lsn{(static_cast<std::uint64_t>(hi) << 32) | lo, timeline};
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

std::string Lsn::to_string_with_timeline() const {
  if (timeline == 0) return to_string();
  return std::to_string(timeline) + ":" + to_string();
}

Lsn request_lsn() noexcept {
  const WritePosition p = current_position();
  return Lsn{p.value, p.timeline};
}

void require_lsn(Lsn lsn) noexcept {
  const Current at;
  if (at.context != nullptr) at.context->raise_position(lsn.value, lsn.timeline);
  if (at.slot != nullptr) at.slot->position.raise(lsn.value, lsn.timeline);
}

CarriedPosition carried_position() noexcept {
  const WritePosition p = current_position();
  return {Lsn{p.value, p.timeline}, p.primary_only};
}

void carry_position(const CarriedPosition& position) noexcept {
  const WritePosition p{position.lsn.value, position.lsn.timeline, position.primary_only};
  const Current at;
  if (at.context != nullptr) at.context->set_position(p);
  if (at.slot != nullptr) at.slot->position = p;
}

detail::RequestPosition detail::request_position() noexcept {
  const WritePosition p = current_position();
  return {p.value, p.timeline, p.primary_only};
}

void detail::note_write(std::uint64_t lsn, std::uint32_t timeline) noexcept {
  const Current at;
  if (at.context != nullptr) {
    if (lsn == 0) at.context->position_unknown();
    at.context->raise_position(lsn, timeline);
  }
  if (at.slot != nullptr) {
    if (lsn == 0) at.slot->position.primary_only = true;
    at.slot->position.raise(lsn, timeline);
  }
}

Status detail::unconfirmed_write() {
  note_write(0, 0);
  return unconfirmed_commit();
}

}  // namespace holdfast::pg
