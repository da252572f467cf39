//! The API's series, served on the same `/metrics` as the sweeper's.
//!
//! | series | what |
//! |---|---|
//! | `queen_api_requests_total{method,route,status}` | answered requests, by route template (never by raw path, so a key cannot become a label) |
//! | `queen_api_refused_total{reason}` | requests refused before a handler ran: `busy` (no in-flight slot), `timeout` (past the deadline), `database_down` (the database is known to be down, [`super::health`]), `unauthenticated` (401: no valid token), `forbidden` (403: another tenant, or the switches without the operator's token) |
//! | `queen_api_in_flight` | requests holding a slot now |
//! | `queen_api_database_up` | 0 from a failed health probe until one succeeds, 1 otherwise |
//! | `queen_api_wakes_total{moved}` | wakes rung after a committed schedule, and whether each moved the sweeper's next look earlier |

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;

use queen_sweeper::Metrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabel {
    pub method: String,
    pub route: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MovedLabel {
    pub moved: &'static str,
}

/// Every series of the API. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ApiMetrics {
    registry: Arc<Registry>,
    pub requests: Family<RequestLabel, Counter>,
    pub refused: Family<ReasonLabel, Counter>,
    pub in_flight: Gauge,
    pub database_up: Gauge,
    pub wakes: Family<MovedLabel, Counter>,
}

impl Default for ApiMetrics {
    fn default() -> Self {
        ApiMetrics::new()
    }
}

impl ApiMetrics {
    pub fn new() -> ApiMetrics {
        let requests = Family::default();
        let refused = Family::default();
        let in_flight = Gauge::default();
        let database_up = Gauge::default();
        let wakes = Family::default();
        let mut registry = Registry::default();
        registry.register(
            "queen_api_requests",
            "Answered API requests by method, route template and status",
            requests.clone(),
        );
        registry.register(
            "queen_api_refused",
            "Requests refused before a handler ran (busy, timeout, database_down, ...)",
            refused.clone(),
        );
        registry.register(
            "queen_api_in_flight",
            "API requests holding an in-flight slot",
            in_flight.clone(),
        );
        registry.register(
            "queen_api_database_up",
            "0 while the API takes its database to be down (a health probe failed), 1 otherwise",
            database_up.clone(),
        );
        registry.register(
            "queen_api_wakes",
            "Wakes rung after a committed schedule, by whether they moved the next look",
            wakes.clone(),
        );
        ApiMetrics {
            registry: Arc::new(registry),
            requests,
            refused,
            in_flight,
            database_up,
            wakes,
        }
    }

    pub fn refused(&self, reason: &'static str) {
        self.refused.get_or_create(&ReasonLabel { reason }).inc();
    }

    pub fn woke(&self, moved: bool) {
        let moved = if moved { "true" } else { "false" };
        self.wakes.get_or_create(&MovedLabel { moved }).inc();
    }

    /// The sweeper's series and the API's, as one Prometheus text exposition.
    pub fn render(&self, sweeper: &Metrics) -> String {
        let mut text = String::new();
        sweeper
            .encode_series(&mut text)
            .and_then(|()| {
                prometheus_client::encoding::text::encode_registry(&mut text, &self.registry)
            })
            .and_then(|()| prometheus_client::encoding::text::encode_eof(&mut text))
            .expect("writing to a String cannot fail");
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_exposition_holds_both_sets_and_ends_once() {
        let api = ApiMetrics::new();
        api.refused("busy");
        api.woke(true);
        api.requests
            .get_or_create(&RequestLabel {
                method: "POST".into(),
                route: "/api/v1/timers".into(),
                status: 200,
            })
            .inc();
        let sweeper = Metrics::new();
        sweeper.query("probe");
        let text = api.render(&sweeper);
        for series in [
            "queen_sweeper_queries_total{kind=\"probe\"} 1",
            "queen_api_refused_total{reason=\"busy\"} 1",
            "queen_api_wakes_total{moved=\"true\"} 1",
            "queen_api_requests_total{method=\"POST\",route=\"/api/v1/timers\",status=\"200\"} 1",
            "queen_api_in_flight 0",
            "queen_api_database_up 0",
        ] {
            assert!(text.contains(series), "missing {series:?} in:\n{text}");
        }
        assert_eq!(text.matches("# EOF").count(), 1, "{text}");
        assert!(text.ends_with("# EOF\n"));
    }
}
