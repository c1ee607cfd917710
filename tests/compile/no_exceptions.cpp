// Built with -fno-exceptions: the headers compile, decode and the razor cache work, and a bad
// argument prints the razorkv message and aborts (caught here with a SIGABRT handler so that
// ctest sees it).
#include <razorkv/razorkv.hpp>

#include <unistd.h>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory_resource>
#include <vector>

#if !RAZORKV_NO_EXCEPTIONS
#error "this test must be compiled with -fno-exceptions"
#endif

namespace {
extern "C" void on_abort(int) {
  const char message[] = "razorkv aborted as expected\n";
  ssize_t ignored = write(STDOUT_FILENO, message, sizeof(message) - 1);
  (void)ignored;
  _exit(0);
}
}  // namespace

int main() {
  razorkv::dense_kv_cache<float> cache(1, 1, 8);
  std::vector<float> kv(8, 0.5f), q(8, 1.0f), out(8);
  cache.append(0, razorkv::layer_view<const float>::nhd(kv.data(), 1, 1, 8),
               razorkv::layer_view<const float>::nhd(kv.data(), 1, 1, 8));
  razorkv::decode_attention(cache, 0, razorkv::matrix_view<const float>(q.data(), 1, 8),
                            razorkv::matrix_view<float>(out.data(), 1, 8));
  std::printf("decode ok: %g\n", static_cast<double>(out[0]));
  // The razor cache (its rows from a memory resource), prefill attention and save/restore
  // instantiate in a build without exceptions too.
  std::vector<float> prompt(20 * 8, 0.5f);
  const auto prompt_view = razorkv::layer_view<const float>::nhd(prompt.data(), 20, 1, 8);
  razorkv::razor_config config;
  config.fixed_window = 4;
  razorkv::razor_kv_cache<float> razor(razorkv::head_plan(razorkv::model_shape{1, 1, 1, 8}), config,
                                       std::pmr::new_delete_resource());
  razor.compress_chunk(0, prompt_view, prompt_view);
  const razorkv::razor_kv_cache<float> restored =
      razorkv::restore_state<float>(razorkv::save_state(razor));
  razorkv::prefill_attention(restored, 0, razorkv::layer_view<const float>::nhd(q.data(), 1, 1, 8),
                             razorkv::layer_view<float>::nhd(out.data(), 1, 1, 8));
  std::printf("razor ok: %g\n", static_cast<double>(out[0]));
  std::fflush(stdout);
  std::signal(SIGABRT, on_abort);
  razorkv::matrix_view<const float> bad(q.data(), 1, -3);  // aborts with the message on stderr
  (void)bad;
  return 1;
}
