// razorkv/razorkv.hpp: the umbrella header. Include this, or the narrower module headers.
// razorkv shrinks the KV cache of long-context inference with RazorAttention (see README.md).
#pragma once

#include "razorkv/config.hpp"
#include "razorkv/error.hpp"

#include "razorkv/core/any_view.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/eigen.hpp"
#include "razorkv/core/tensor_view.hpp"

#include "razorkv/cache/dense_cache.hpp"
#include "razorkv/cache/kv_cache.hpp"

#include "razorkv/compress/column_sums.hpp"
#include "razorkv/compress/razor_cache.hpp"
#include "razorkv/compress/razor_config.hpp"

#include "razorkv/attention/decode.hpp"
#include "razorkv/attention/reference.hpp"

#include "razorkv/policies/h2o.hpp"
#include "razorkv/policies/memory_budget.hpp"
#include "razorkv/policies/observed_attention.hpp"
#include "razorkv/policies/razor_at_budget.hpp"
#include "razorkv/policies/selected_cache.hpp"
#include "razorkv/policies/snapkv.hpp"
#include "razorkv/policies/streaming_llm.hpp"

#include "razorkv/eval/harness.hpp"
#include "razorkv/eval/needle_task.hpp"

#include "razorkv/scoring/dense_scorer.hpp"
#include "razorkv/scoring/head_scores.hpp"
#include "razorkv/scoring/probe.hpp"
#include "razorkv/scoring/streaming_scorer.hpp"

#include "razorkv/select/alibi.hpp"
#include "razorkv/select/head_plan.hpp"
#include "razorkv/select/budget_selector.hpp"
#include "razorkv/select/head_selector.hpp"
#include "razorkv/select/kv_budget.hpp"

#include "razorkv/synthetic/planted_heads.hpp"
#include "razorkv/synthetic/planted_model.hpp"
