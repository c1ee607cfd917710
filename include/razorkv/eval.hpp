// razorkv/eval.hpp: the evaluation side of razorkv (target razorkv::eval), outside the engine's
// umbrella: the policy harness, needle tasks, planted-head synthetic models and their suite.
#pragma once

#include "razorkv/razorkv.hpp"

#include "razorkv/attention/reference.hpp"

#include "razorkv/eval/harness.hpp"
#include "razorkv/eval/needle_task.hpp"
#include "razorkv/eval/synthetic_suite.hpp"

#include "razorkv/synthetic/planted_heads.hpp"
#include "razorkv/synthetic/planted_model.hpp"
