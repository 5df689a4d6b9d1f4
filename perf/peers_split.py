"""The mixed tensor sizes of kopt's split rows (perf/bench_tensors.cpp, mixed_split), reproduced
bit for bit so a peer updates exactly the tensors kopt's row updates: `tensors` weights drawn
log-uniform over a 64x range by std::mt19937 seeded with 7, through libstdc++'s
uniform_real_distribution<double>, each tensor llround(total * w / sum) (at least 1) elements.
The sizes sum to about `total`; kopt's row counts their sum ("elements"), and so do the peers.
"""
import math

_MASK = 0xFFFFFFFF


class Mt19937:
    """std::mt19937 (32-bit Mersenne Twister, default seeding): the same stream as C++'s."""

    def __init__(self, seed):
        self.state = [seed & _MASK]
        for i in range(1, 624):
            prev = self.state[-1]
            self.state.append((1812433253 * (prev ^ (prev >> 30)) + i) & _MASK)
        self.index = 624

    def _twist(self):
        s = self.state
        for i in range(624):
            y = (s[i] & 0x80000000) | (s[(i + 1) % 624] & 0x7FFFFFFF)
            s[i] = s[(i + 397) % 624] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)
        self.index = 0

    def __call__(self):
        if self.index >= 624:
            self._twist()
        y = self.state[self.index]
        self.index += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        return y ^ (y >> 18)


def _canonical(rng):
    """libstdc++'s generate_canonical<double, 53> on a 32-bit engine: two draws, in double."""
    total = float(rng()) + float(rng()) * 4294967296.0
    u = total / 18446744073709551616.0
    return u if u < 1.0 else math.nextafter(1.0, 0.0)


def _llround(x):
    """C's llround for x >= 0: halves away from zero (Python's round() goes to even)."""
    whole = math.floor(x)
    return int(whole) + (1 if x - whole >= 0.5 else 0)


def mixed_split(total, tensors):
    """The sizes of `tensors` tensors of mixed sizes summing to about `total` elements."""
    if tensors == 1:
        return [total]
    rng = Mt19937(7)
    span = math.log(64.0)
    weights = [math.exp(_canonical(rng) * span) for _ in range(tensors)]
    weight_sum = 0.0
    for w in weights:  # in order, as the C++ loop adds them
        weight_sum += w
    return [max(1, _llround(float(total) * w / weight_sum)) for w in weights]


if __name__ == "__main__":  # prints a split, to compare with the C++ one
    import sys

    sizes = mixed_split(int(sys.argv[1]), int(sys.argv[2]))
    print(sum(sizes), sizes[:5], sizes[-5:])
