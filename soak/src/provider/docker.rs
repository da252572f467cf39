//! The Docker provider (testcontainers). Being written: see the soak issue's provider section.

use super::{Database, DockerOptions};

pub async fn start(_options: &DockerOptions) -> Result<Database, String> {
    Err("no Docker provider in this build".to_owned())
}
