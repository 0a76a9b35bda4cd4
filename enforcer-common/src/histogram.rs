//! Log-linear latency buckets shared by the kernel (which fills them) and userspace (which
//! reads percentiles out of them).
//!
//! Values below 8 ns get a bucket each; above that every power of two is split into 8 linear
//! sub-buckets, so a bucket's width is at most 1/8 of its lower bound: a p99 read from it is
//! within 12.5% of the true value, against 100% for plain log2 buckets. Bucket 311 covers
//! 2^40 ns (18 minutes) and everything above.

/// Sub-buckets per power of two, as a shift.
pub const SUB_BUCKET_BITS: u32 = 3;
const SUB_BUCKETS: u64 = 1 << SUB_BUCKET_BITS;
/// Highest power of two with buckets of its own; larger values land in the last bucket.
pub const MAX_EXPONENT: u32 = 40;
/// Number of buckets.
pub const NR_BUCKETS: usize =
    ((MAX_EXPONENT + 1 - SUB_BUCKET_BITS + 1) as usize) << SUB_BUCKET_BITS;

/// The bucket that holds `ns`. Loop-free, for the eBPF verifier.
#[inline(always)]
pub fn bucket_of(ns: u64) -> usize {
    if ns < SUB_BUCKETS {
        return ns as usize;
    }
    // The highest set bit of `ns` less SUB_BUCKET_BITS, found without a subtraction: every
    // step of this function then has bounds the eBPF verifier can follow, and the caller
    // needs no bounds check of its own (a check it could not drop cost a store and a load).
    let above_sub = highest_set_bit(ns >> SUB_BUCKET_BITS);
    if above_sub > MAX_EXPONENT - SUB_BUCKET_BITS {
        return NR_BUCKETS - 1;
    }
    let sub = (ns >> above_sub) & (SUB_BUCKETS - 1);
    (((above_sub + 1) as usize) << SUB_BUCKET_BITS) + sub as usize
}

/// The index of the highest set bit of `x` (0 for 0), as six halving steps. BPF has no
/// count-leading-zeros instruction: LLVM expands `leading_zeros` into some 45 instructions
/// (shift-or cascade, then a population count), and on sched_switch here that histogram update
/// measured about 9 ns more than this one, in `enforcer calibrate`-style programs run side by
/// side.
#[inline(always)]
pub fn highest_set_bit(x: u64) -> u32 {
    let mut rest = x;
    let mut bit = 0;
    for shift in [32, 16, 8, 4, 2, 1] {
        if rest >> shift != 0 {
            rest >>= shift;
            bit += shift;
        }
    }
    bit
}

/// Smallest value that lands in `bucket`.
pub fn bucket_lower_bound(bucket: usize) -> u64 {
    if bucket < SUB_BUCKETS as usize {
        return bucket as u64;
    }
    let exponent = (bucket >> SUB_BUCKET_BITS) as u32 + SUB_BUCKET_BITS - 1;
    let sub = (bucket as u64) & (SUB_BUCKETS - 1);
    (1u64 << exponent) + (sub << (exponent - SUB_BUCKET_BITS))
}

/// Largest value that lands in `bucket` (saturating for the last one).
pub fn bucket_upper_bound(bucket: usize) -> u64 {
    if bucket + 1 >= NR_BUCKETS {
        return u64::MAX;
    }
    bucket_lower_bound(bucket + 1) - 1
}

/// The value at quantile `q` of a bucketed histogram: the upper bound of the bucket where the
/// cumulative count reaches `q` of the total. None for an empty histogram.
pub fn percentile(hist: &[u64], q: f64) -> Option<u64> {
    let total: u64 = hist.iter().sum();
    if total == 0 {
        return None;
    }
    // ceil(total * q) without std's float math: this crate is no_std.
    let exact = total as f64 * q;
    let mut rank = exact as u64;
    if (rank as f64) < exact {
        rank += 1;
    }
    let rank = rank.max(1);
    let mut seen = 0;
    for (bucket, &count) in hist.iter().enumerate() {
        seen += count;
        if seen >= rank {
            return Some(bucket_upper_bound(bucket));
        }
    }
    Some(bucket_upper_bound(NR_BUCKETS - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highest_set_bit_agrees_with_leading_zeros() {
        assert_eq!(highest_set_bit(0), 0);
        for bit in 0..64 {
            let x = 1u64 << bit;
            for value in [x, x | (x >> 1), x | 1, (x - 1) | x] {
                assert_eq!(
                    highest_set_bit(value),
                    63 - value.leading_zeros(),
                    "{value:#x}"
                );
            }
        }
        assert_eq!(highest_set_bit(u64::MAX), 63);
    }

    #[test]
    fn every_value_lands_inside_its_bucket_bounds() {
        let mut v = 0u64;
        while v < (1u64 << 42) {
            let b = bucket_of(v);
            assert!(b < NR_BUCKETS, "{v} -> {b}");
            if v < (1u64 << (MAX_EXPONENT + 1)) {
                assert!(
                    bucket_lower_bound(b) <= v && v <= bucket_upper_bound(b),
                    "{v} -> {b}"
                );
            } else {
                assert_eq!(b, NR_BUCKETS - 1);
            }
            v = v * 9 / 8 + 1;
        }
    }

    #[test]
    fn buckets_are_contiguous_and_relative_width_is_at_most_an_eighth() {
        for b in 0..NR_BUCKETS - 1 {
            assert_eq!(
                bucket_upper_bound(b) + 1,
                bucket_lower_bound(b + 1),
                "bucket {b}"
            );
            let lo = bucket_lower_bound(b);
            let width = bucket_upper_bound(b) - lo + 1;
            assert!(
                lo < 8 || width * 8 <= lo,
                "bucket {b}: lo {lo} width {width}"
            );
        }
        assert_eq!(bucket_of(u64::MAX), NR_BUCKETS - 1);
    }
}
