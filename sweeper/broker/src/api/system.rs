//! The operator's surface: the two kill switches, `/healthz` and `/metrics`.
//!
//! A switch is written to `queen.system_state` first and to this process second
//! ([`queen_sweeper::Switches::set`]); the other brokers read it within five seconds
//! (`cycle::SWITCH_REFRESH`). A `GET` reads the database, so it answers what every broker will
//! soon obey, and refreshes this process's copy on the way.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::ApiState;
use super::errors::ApiError;
use super::health::{HEALTHZ_LIMIT, suggests_outage};
use super::input::{json_body, object, typed};
use queen_sweeper::{Switch, SwitchStates};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SwitchesWire {
    #[serde(default)]
    schedule_enabled: Option<bool>,
    #[serde(default)]
    fire_enabled: Option<bool>,
}

fn states(states: SwitchStates) -> Json<Value> {
    Json(json!({
        "scheduleEnabled": states.schedule_enabled,
        "fireEnabled": states.fire_enabled,
    }))
}

/// `GET /api/v1/system/switches`.
pub async fn get_switches(State(state): State<ApiState>) -> Result<Json<Value>, ApiError> {
    let inner = &state.inner;
    let read = inner
        .switches
        .refresh(inner.db.store(), &inner.admission)
        .await?;
    Ok(states(read))
}

/// `POST /api/v1/system/switches` with `{"scheduleEnabled": bool, "fireEnabled": bool}`, either
/// or both.
pub async fn set_switches(
    State(state): State<ApiState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let inner = &state.inner;
    let wire: SwitchesWire = typed(
        object(json_body(body, &inner.limits)?, "the body")?,
        "the body",
    )?;
    let wanted = [
        (Switch::Schedule, wire.schedule_enabled),
        (Switch::Fire, wire.fire_enabled),
    ];
    if wanted.iter().all(|(_, enabled)| enabled.is_none()) {
        return Err(ApiError::bad_request(
            "invalid_request",
            "give \"scheduleEnabled\", \"fireEnabled\" or both",
        ));
    }
    for (switch, enabled) in wanted {
        if let Some(enabled) = enabled {
            inner
                .switches
                .set(inner.db.store(), &inner.admission, switch, enabled)
                .await?;
        }
    }
    Ok(states(inner.switches.states()))
}

/// `GET /healthz`: 200 `ok` once the database answers and holds the schema this binary serves;
/// 503 with the reason otherwise, within [`HEALTHZ_LIMIT`]: at once while the database is known to
/// be down, and after the limit when it does not answer (which has it probed).
pub async fn healthz(State(state): State<ApiState>) -> (StatusCode, String) {
    let inner = &state.inner;
    if let Some(down) = inner.health.down() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}", down.describe()),
        );
    }
    match tokio::time::timeout(HEALTHZ_LIMIT, inner.db.schema_ready()).await {
        Ok(Ok(true)) => (StatusCode::OK, "ok".to_owned()),
        Ok(Ok(false)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the database answers but the queen schema is not applied".to_owned(),
        ),
        Ok(Err(error)) => {
            if suggests_outage(&error) {
                inner.health.suspect("/healthz got no answer");
            }
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: the database does not answer ({error})"),
            )
        }
        Err(_) => {
            inner.health.suspect("/healthz got no answer in time");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "not ready: the database did not answer within {} ms",
                    HEALTHZ_LIMIT.as_millis()
                ),
            )
        }
    }
}

/// `GET /metrics`: the sweeper's series and the API's, Prometheus text.
pub async fn metrics(State(state): State<ApiState>) -> String {
    state.inner.metrics.render(&state.inner.sweeper_metrics)
}
