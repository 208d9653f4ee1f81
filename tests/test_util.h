// test_util.h: what every CPU test in tests/ shares: one PASS/FAIL line a case (scripts/test.sh counts
// them), a printf into a std::string, and the closing line with the exit status.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>

static int test_failures = 0, test_passes = 0;

// "PASS name", or "FAIL name: why"
static void report(bool ok, const std::string& name, const std::string& why = "") {
    if (ok) {
        printf("PASS %s\n", name.c_str());
        test_passes++;
    } else {
        printf("FAIL %s: %s\n", name.c_str(), why.c_str());
        test_failures++;
    }
    fflush(stdout);
}

static std::string fmt(const char* f, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return buf;
}

// the last line of a test binary, and its exit status (1 when a case failed)
static int test_summary() {
    printf("%s: %d cases, %d failed\n", test_failures ? "FAILED" : "ok", test_passes + test_failures, test_failures);
    return test_failures ? 1 : 0;
}
