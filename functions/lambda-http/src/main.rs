//! Lambda entry point: configuration and clients once per process, then the
//! Lambda runtime loop with streaming responses.

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    let _telemetry = lambda_http_fn::init_logs()?;
    let runner = lambda_http_fn::Runner::from_env()?;
    let router = lambda_http_fn::router_from_env().await?;
    lambda_http_fn::run(router, runner).await
}
