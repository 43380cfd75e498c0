/* target.c — see target.h. */
#include "tools/bench/target.h"

cfg target_cfg;
struct sockaddr_storage target_addr;
socklen_t target_addr_len;
