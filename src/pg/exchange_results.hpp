// How one statement's results are gathered, shared by the blocking exchange (exchange.cpp)
// and the event loop's (loop_connection.cpp). Not installed.
#pragma once

#include <libpq-fe.h>

namespace holdfast::pg {

// Keeps the first error in `bad`, unless a later one carries a SQLSTATE and it did not
// (the FATAL of a terminated backend, then "server closed the connection"). Takes `r`.
// True when `r` became `bad`.
inline bool keep_error(PGresult*& bad, PGresult* r) noexcept {
  if (bad == nullptr || (PQresultErrorField(bad, PG_DIAG_SQLSTATE) == nullptr &&
                         PQresultErrorField(r, PG_DIAG_SQLSTATE) != nullptr)) {
    if (bad != nullptr) PQclear(bad);
    bad = r;
    return true;
  }
  PQclear(r);
  return false;
}

// Ends a COPY the server started (holdfast sends no COPY data and reads none). Takes `r`.
inline void end_copy(PGconn* conn, PGresult* r) noexcept {
  if (PQresultStatus(r) == PGRES_COPY_IN) {
    PQputCopyEnd(conn, "holdfast does not support COPY");
  } else {
    char* buf = nullptr;
    while (PQgetCopyData(conn, &buf, 0) > 0)
      PQfreemem(buf);
  }
  PQclear(r);
}

inline bool is_rows(ExecStatusType st) noexcept {
  return st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK || st == PGRES_SINGLE_TUPLE;
}

inline bool is_copy(ExecStatusType st) noexcept {
  return st == PGRES_COPY_IN || st == PGRES_COPY_OUT;
}

}  // namespace holdfast::pg
