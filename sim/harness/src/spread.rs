//! The spread of a sample: how many, the median, the tail and the worst, rounded to a tenth.
//! The sim computes it from every value it recorded (it keeps them all); the soak from an
//! HdrHistogram (three significant digits), because a soak run records millions.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Count, p50, p90, p99 and max of a sample, each rounded to one decimal.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Spread {
    /// Values in the sample.
    pub count: u64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// The largest value.
    pub max: f64,
}

/// The sim's report shape of a [`Spread`]: p50, p99 and max only. The sim's JSON is the oracle
/// that its behaviour survived a refactor byte for byte, so its shape stays as it was before the
/// count and p90 were shared with the soak.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ShortSpread {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// The largest value.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`, by nearest rank: the quantile `q` is the value at index
    /// `round((n - 1) × q)` of the sorted sample.
    pub fn of_values(mut values: Vec<f64>) -> Spread {
        if values.is_empty() {
            return Spread::default();
        }
        values.sort_by(f64::total_cmp);
        let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
        Spread {
            count: values.len() as u64,
            p50: round1(at(0.5)),
            p90: round1(at(0.9)),
            p99: round1(at(0.99)),
            max: round1(*values.last().expect("non-empty")),
        }
    }

    /// The spread of a histogram's values divided by `scale` (1000.0 turns recorded
    /// microseconds into milliseconds).
    pub fn of(histogram: &Histogram<u64>, scale: f64) -> Spread {
        if histogram.is_empty() {
            return Spread::default();
        }
        let at = |q: f64| round1(histogram.value_at_quantile(q) as f64 / scale);
        Spread {
            count: histogram.len(),
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            max: round1(histogram.max() as f64 / scale),
        }
    }

    /// The sim's report shape.
    pub fn short(&self) -> ShortSpread {
        ShortSpread {
            p50: self.p50,
            p99: self.p99,
            max: self.max,
        }
    }
}

/// Serialises a [`Spread`] in the sim's report shape, for `#[serde(serialize_with)]`.
pub fn serialize_short<S: serde::Serializer>(
    spread: &Spread,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    spread.short().serialize(serializer)
}

/// Rounds to one decimal: reports print tenths, and the JSON should not carry float noise.
pub fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_picks_the_rounded_index_of_the_sorted_sample() {
        let spread = Spread::of_values((1..=101).rev().map(f64::from).collect());
        assert_eq!(spread.count, 101);
        assert_eq!(spread.p50, 51.0);
        assert_eq!(spread.p90, 91.0);
        assert_eq!(spread.p99, 100.0);
        assert_eq!(spread.max, 101.0);
    }

    #[test]
    fn an_empty_sample_is_all_zero() {
        assert_eq!(Spread::of_values(Vec::new()), Spread::default());
        let empty = Histogram::<u64>::new(3).expect("valid precision");
        assert_eq!(Spread::of(&empty, 1000.0), Spread::default());
    }

    /// Three significant digits: a value reads back within a thousandth of itself.
    #[test]
    fn a_histogram_of_microseconds_reads_in_milliseconds() {
        let mut histogram = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("bounds");
        for micros in 1..=1000 {
            histogram.record(micros * 1000).expect("in bounds");
        }
        let spread = Spread::of(&histogram, 1000.0);
        assert_eq!(spread.count, 1000);
        assert!((500.0..=500.5).contains(&spread.p50), "{spread:?}");
        assert!((1000.0..=1001.0).contains(&spread.max), "{spread:?}");
    }

    #[test]
    fn the_short_shape_is_p50_p99_max_in_that_order() {
        #[derive(Serialize)]
        struct Report {
            #[serde(serialize_with = "serialize_short")]
            late: Spread,
        }
        let late = Spread::of_values(vec![1.0, 2.0, 3.0]);
        let text = serde_json::to_string(&Report { late }).expect("serialises");
        assert_eq!(text, r#"{"late":{"p50":2.0,"p99":3.0,"max":3.0}}"#);
    }

    #[test]
    fn a_spread_reads_back_what_it_wrote() {
        let spread = Spread::of_values(vec![0.25, 7.0, 3.5]);
        let text = serde_json::to_string(&spread).expect("serialises");
        assert_eq!(
            serde_json::from_str::<Spread>(&text).expect("reads"),
            spread
        );
    }
}
