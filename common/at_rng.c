/* common/at_rng.c -- xoshiro256** seeded through splitmix64. */
#include "common.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void at_rng_seed(at_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t at_rng_u64(at_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t at_rng_below(at_rng *r, uint64_t n)
{
    uint64_t limit, x;
    if (n <= 1)
        return 0;
    limit = UINT64_MAX - UINT64_MAX % n; /* reject the biased tail */
    do
        x = at_rng_u64(r);
    while (x >= limit);
    return x % n;
}

double at_rng_double(at_rng *r)
{
    return (double)(at_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

void at_rng_split(at_rng *master, at_rng *child)
{
    at_rng_seed(child, at_rng_u64(master));
}
