/* gmjit.h compiled as C99 (-std=c99 -pedantic -Werror) and used from C: the catalog, a
 * description, a usage error with its reason, and the handle checks. Exit status 0 when all hold. */
#include "gmjit/gmjit.h"

#include <stdio.h>
#include <string.h>

static int failures = 0;

static void expect(int condition, const char* what) {
  if (!condition) {
    fprintf(stderr, "header_is_c: %s (last error: %s)\n", what, gmjit_last_error());
    ++failures;
  }
}

int main(void) {
  char* json = NULL;
  const char* keys[] = {"n"};
  const int64_t values[] = {1023};
  const char* bad_keys[] = {"rows"};
  gmjit_runtime* runtime = NULL;

  expect(gmjit_api_version() == GMJIT_API_VERSION, "api version");
  expect(strlen(gmjit_version()) > 0, "version");
  expect(gmjit_list_kernels(&json) == GMJIT_OK && json != NULL && strstr(json, "\"vector_add\"") != NULL,
         "list_kernels names vector_add");
  gmjit_free(json);
  expect(gmjit_describe("vector_add", NULL, keys, values, 1, &json) == GMJIT_OK && strstr(json, "\"count\": 1023"),
         "describe counts 1023 elements");
  gmjit_free(json);
  expect(gmjit_describe("vector_add", NULL, bad_keys, values, 1, &json) == GMJIT_ERROR_USAGE && json == NULL,
         "an unknown key is a usage error");
  expect(strstr(gmjit_last_error(), "rows") != NULL, "the reason names the key");
  expect(gmjit_runtime_close(NULL) == GMJIT_ERROR_USAGE, "closing NULL is a usage error");
  expect(gmjit_runtime_open(0, NULL, GMJIT_MISS_FAIL, &runtime) == GMJIT_OK && runtime != NULL, "open");
  expect(gmjit_runtime_close(runtime) == GMJIT_OK, "close");
  expect(strcmp(gmjit_last_error(), "") == 0, "a success clears the reason");
  if (failures == 0) printf("header_is_c: ok\n");
  return failures == 0 ? 0 : 1;
}
