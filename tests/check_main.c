/* Shared Check runner: each tests/test_<module>.c defines <module>_suite(). */
#include <check.h>
#include <stdlib.h>

Suite *SUITE_FN(void);

int main(void)
{
    SRunner *sr = srunner_create(SUITE_FN());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
