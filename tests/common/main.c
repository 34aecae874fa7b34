/* braid_tests' main: Criterion's own, but in ASan builds the runner ends with _exit.
 *
 * The runner (this process) only spawns the test processes and collects their results; Criterion
 * leaks two small blocks there when it runs tests in parallel (-j2), found by LeakSanitizer's
 * check at exit. The test processes (each a fresh exec of this binary, which does not pass
 * through this main) keep their own check at exit, with no suppression for Criterion: a
 * suppression naming libcriterion matched every test's allocations (the test functions run
 * under Criterion's frames) and hid the leaks of every test. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char *argv[])
{
    struct criterion_test_set *tests = criterion_initialize();
    int result = 0;
    if (criterion_handle_args(argc, argv, true)) result = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
#if defined(__SANITIZE_ADDRESS__)
    fflush(NULL);
    _exit(result);
#else
    return result;
#endif
}
