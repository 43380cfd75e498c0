/* target.c — see target.h. */
#include "tools/bench/target.h"

cfg C;
struct sockaddr_storage target;
socklen_t target_len;
