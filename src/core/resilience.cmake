# The breaker, the retry throttle, the health probe, the Shield and its metrics: part of
# holdfast_core (standard library only).
target_sources(holdfast_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/circuit_breaker.cpp
  ${CMAKE_CURRENT_LIST_DIR}/concurrency_limit.cpp
  ${CMAKE_CURRENT_LIST_DIR}/health_probe.cpp
  ${CMAKE_CURRENT_LIST_DIR}/liveness.cpp
  ${CMAKE_CURRENT_LIST_DIR}/metrics.cpp
  ${CMAKE_CURRENT_LIST_DIR}/retry_throttle.cpp
  ${CMAKE_CURRENT_LIST_DIR}/shield.cpp
  ${CMAKE_CURRENT_LIST_DIR}/shield_line.cpp
  ${CMAKE_CURRENT_LIST_DIR}/striped_window.cpp
  ${CMAKE_CURRENT_LIST_DIR}/stripes.cpp
)
