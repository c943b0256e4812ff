// libFuzzer target: the PostgreSQL SQL classifier never crashes, never reads out of bounds,
// and says the same thing twice.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "holdfast/pg/sql.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view sql(reinterpret_cast<const char*>(data), size);
  for (bool standard : {true, false}) {
    const holdfast::pg::SqlClass a = holdfast::pg::classify_sql(sql, standard);
    const holdfast::pg::SqlClass b = holdfast::pg::classify_sql(sql, standard);
    if (a.kind != b.kind) __builtin_trap();
    (void)a.explain();
  }
  return 0;
}
