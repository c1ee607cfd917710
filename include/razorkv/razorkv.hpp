// razorkv/razorkv.hpp: the umbrella header, what an inference engine needs: caches and sources,
// compression, decode attention, the policies, head scoring and selection (see README.md).
#pragma once

#include "razorkv/config.hpp"
#include "razorkv/error.hpp"

#include "razorkv/core/any_view.hpp"
#include "razorkv/core/dtype.hpp"
#include "razorkv/core/eigen.hpp"
#include "razorkv/core/head_plan.hpp"
#include "razorkv/core/parallel_for.hpp"
#include "razorkv/core/tensor_view.hpp"
#include "razorkv/core/thread_pool.hpp"

#include "razorkv/cache/any_cache.hpp"
#include "razorkv/cache/attention_weights.hpp"
#include "razorkv/cache/dense_cache.hpp"
#include "razorkv/cache/huge_page_resource.hpp"
#include "razorkv/cache/kv_cache.hpp"
#include "razorkv/cache/paged_view.hpp"

#include "razorkv/compress/column_sums.hpp"
#include "razorkv/compress/kv_memory.hpp"
#include "razorkv/compress/razor_cache.hpp"
#include "razorkv/compress/razor_config.hpp"
#include "razorkv/compress/razor_state.hpp"
#include "razorkv/compress/window_rule.hpp"

#include "razorkv/attention/decode.hpp"
#include "razorkv/attention/prefill.hpp"

#include "razorkv/policies/any_policy.hpp"
#include "razorkv/policies/h2o.hpp"
#include "razorkv/policies/memory_budget.hpp"
#include "razorkv/policies/observed_attention.hpp"
#include "razorkv/policies/policy.hpp"
#include "razorkv/policies/razor.hpp"
#include "razorkv/policies/selected_cache.hpp"
#include "razorkv/policies/snapkv.hpp"
#include "razorkv/policies/streaming_llm.hpp"

#include "razorkv/scoring/dense_scorer.hpp"
#include "razorkv/scoring/head_scores.hpp"
#include "razorkv/scoring/probe.hpp"
#include "razorkv/scoring/streaming_scorer.hpp"

#include "razorkv/select/alibi.hpp"
#include "razorkv/select/head_selector.hpp"
#include "razorkv/select/memory_selector.hpp"

// Not here, on purpose: razorkv/eval.hpp (the evaluation harness, needle tasks and synthetic
// models: the razorkv::eval target), razorkv/attention/reference.hpp (the scalar oracle the
// tests compare against) and razorkv/io/ (file formats: razorkv::io, needs nlohmann-json).
