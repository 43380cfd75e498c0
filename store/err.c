/* err.c — names for the BERTH_E* codes of err.h. */
#include "store/err.h"

const char *berth_strerror(int rv)
{
    switch (rv) {
    case BERTH_OK:
        return "ok";
    case BERTH_ENOMEM:
        return "out of memory";
    case BERTH_EIO:
        return "store i/o failed";
    case BERTH_ECORRUPT:
        return "stored data is corrupt";
    case BERTH_ENOTFOUND:
        return "not found";
    case BERTH_EINVAL:
        return "invalid argument";
    case BERTH_ECLOSED:
        return "closed";
    case BERTH_EFORMAT:
        return "unsupported on-disk format version";
    }
    return "unknown error";
}
