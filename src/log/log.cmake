# The logger (std only): Logger, ConsoleSink, DatabaseSink, retention. Included by
# src/CMakeLists.txt into holdfast_core. The spdlog adapter (include/holdfast/log/spdlog_sink.hpp)
# is header-only and needs no target: its users link spdlog::spdlog themselves.
target_sources(holdfast_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/console_sink.cpp
  ${CMAKE_CURRENT_LIST_DIR}/database_sink.cpp
  ${CMAKE_CURRENT_LIST_DIR}/logger.cpp
  ${CMAKE_CURRENT_LIST_DIR}/loss_report.cpp
  ${CMAKE_CURRENT_LIST_DIR}/overload_pause.cpp
  ${CMAKE_CURRENT_LIST_DIR}/retention.cpp
)
