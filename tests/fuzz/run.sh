#!/usr/bin/env bash
# Builds the libFuzzer harnesses in tests/fuzz (fuzz_tcp_header.c, fuzz_boot_hello.c when
# present) with clang -fsanitize=fuzzer,address,undefined and runs each for N seconds.
#
#   tests/fuzz/run.sh [SECONDS]        (default 20; or FUZZ_SECONDS)
#
# Binaries, corpora and crash files go to build-fuzz/ (ignored by git). Exit status is non-zero
# if a harness does not build or finds a crash; the last line is "fuzz: N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
secs=${1:-${FUZZ_SECONDS:-20}}
out=build-fuzz
cc=${CC_FUZZ:-clang}
mkdir -p "$out"
if ! command -v "$cc" >/dev/null 2>&1; then
    echo "fuzz: $cc not found (apt-get install clang)" >&2
    exit 1
fi
# shellcheck disable=SC2054 # the commas belong to -fsanitize
flags=(-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I include
    -I src -D_GNU_SOURCE)
common=(src/core/log.c src/core/config.c src/core/hmac.c)

# Seeds: one well-formed input of each kind, so the fuzzer starts past the magic checks.
# shellcheck disable=SC2059 # the seed bytes are printf escapes
seed() { mkdir -p "$out/corpus_$1" && printf "$3" >"$out/corpus_$1/$2"; }
seed tcp_header frame '\x08\x00BTRD\x10\x00\x00\x00\x01\x00\x00\x00\x01\x08\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00'
seed tcp_header abort '\x00\x01BTRD\x05\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\xff\xff\xff\xff\xfc\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00\x00hello'
seed tcp_header hello 'BTCH\x02\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00ABCDEFGHIJKLMNOPabcdefghijklmnopqrstuvwxyz012345'
seed tcp_header info4 'BTCI\x04\x00\x39\x30\x7f\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00NONCE-0123456789'
seed boot_hello hello 'BRDH\x02\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00ABCDEFGHIJKLMNOP'
seed tcp_header info6 'BTCI\x06\x00\x39\x30\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x01\x00\x00\x00\x00\x10\x00\x00\x00\x00\x00\x00NONCE-0123456789'

passed=0 failed=0
run() { # name sources...
    local name=$1
    shift
    echo "== fuzz_$name: build"
    if ! "$cc" "${flags[@]}" "$@" "${common[@]}" -lpthread -lm -o "$out/fuzz_$name"; then
        echo "fuzz_$name: build FAILED"
        failed=$((failed + 1))
        return
    fi
    mkdir -p "$out/corpus_$name" "$out/crash_$name"
    echo "== fuzz_$name: ${secs} s"
    if BRAID_DEBUG=NONE "$out/fuzz_$name" -max_total_time="$secs" -print_final_stats=1 \
        -artifact_prefix="$out/crash_$name/" "$out/corpus_$name" >"$out/fuzz_$name.log" 2>&1; then
        grep -E "stat::number_of_executed_runs|Done" "$out/fuzz_$name.log" | tail -2
        passed=$((passed + 1))
    else
        tail -n 30 "$out/fuzz_$name.log"
        echo "fuzz_$name: FAILED (log $out/fuzz_$name.log, input in $out/crash_$name/)"
        failed=$((failed + 1))
    fi
}

run tcp_header tests/fuzz/fuzz_tcp_header.c src/transport/tcp_wire.c src/core/bootstrap_addr.c
if [ -f tests/fuzz/fuzz_boot_hello.c ]; then
    run boot_hello tests/fuzz/fuzz_boot_hello.c src/core/bootstrap.c src/core/bootstrap_addr.c \
        src/core/bootstrap_root.c src/core/bootstrap_sock.c src/core/bootstrap_threads.c \
        src/core/fd_reserve.c
fi
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
