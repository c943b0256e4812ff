// How the panel talks to its database: holdfast (a Shield, one RequestScope per page
// render, the overload-aware log sink), or one of the baselines the drill compares it with.
// The baselines, their names and what each one does are the drill's (apps/drill/baselines,
// ADR 0046); the store runs a baselines::Runner for them.
#pragma once

#include "baselines/strategy.hpp"

namespace holdfast::panel {

using baselines::Strategy;

}  // namespace holdfast::panel
