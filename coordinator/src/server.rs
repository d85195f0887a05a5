//! Serving: both gRPC services (behind the auth and metrics layers) and the background tasks, until a
//! shutdown future resolves; then everything still queued is written before `serve` returns. A member of a
//! replicated coordinator serves the same services and `Replication` ([`serve_member`]). Both are parts that
//! [`crate::start()`] puts together; nothing else calls them.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use sweep_proto::v1::{jobs_server, work_server};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_stream::StreamExt;
use tracing::info;

use crate::auth::ServeSecurity;
use crate::coordinator::{Coordinator, ServeError, Tasks};
use crate::grpc::replication::ReplicationApi;
use crate::grpc::Backend;
use crate::member::Leadership;
use sweep_proto::v1::replication_server::ReplicationServer;

/// Serves both services on `listener` until `shutdown` resolves, then writes what is still queued and returns.
/// `security` adds TLS and token checks ([`crate::auth`]); its `Default` serves plain and open.
pub async fn serve(
    listener: TcpListener,
    coord: Arc<Coordinator>,
    security: ServeSecurity,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let tasks = Tasks::start(&coord);
    let result = serve_backend(
        listener,
        Backend::Single(coord.clone()),
        coord.metrics.clone(),
        security,
        None,
        async {
            shutdown.await;
            coord.begin_stopping();
        },
    )
    .await;
    tasks.stop().await;
    info!("coordinator stopped");
    result
}

/// Serves one member of a replicated coordinator on `listener`: the `Replication` service for the other
/// members, and both client services, which the coordinator `leadership` runs answers while this member leads
/// (see [`crate::member`]; the caller runs [`Leadership::run`] beside this). Returns when `shutdown`
/// resolves.
pub async fn serve_member(
    listener: TcpListener,
    leadership: Arc<Leadership>,
    replication: ReplicationServer<ReplicationApi>,
    security: ServeSecurity,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let metrics = leadership.metrics().clone();
    let result = serve_backend(
        listener,
        Backend::Member(leadership),
        metrics,
        security,
        Some(replication),
        shutdown,
    )
    .await;
    info!("member stopped serving");
    result
}

async fn serve_backend(
    listener: TcpListener,
    backend: Backend,
    metrics: Arc<crate::metrics::Metrics>,
    security: ServeSecurity,
    replication: Option<ReplicationServer<ReplicationApi>>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let addr: SocketAddr = listener.local_addr()?;
    // Pings on every connection, answered or the connection is closed: a worker or client that went silent (its
    // machine stopped, its link dropping packets) stops holding a connection and its streams.
    let mut server = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(sweep_proto::deadline::KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(sweep_proto::deadline::KEEPALIVE_TIMEOUT))
        .tcp_keepalive(Some(sweep_proto::deadline::TCP_KEEPALIVE));
    if let Some(tls) = security.tls {
        server = server.tls_config(tls)?;
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let reloader = (security.auth.clone()).map(|a| tokio::spawn(a.watch_files(stop_rx.clone())));
    info!(%addr, "coordinator listening");
    // Small RPCs (lease, complete) must not wait for delayed ACKs: Nagle's algorithm off on every connection,
    // which tonic only does itself for listeners it binds.
    let incoming = TcpListenerStream::new(listener).map(|conn| {
        conn.and_then(|c| {
            c.set_nodelay(true)?;
            Ok(c)
        })
    });
    let (work, jobs) = crate::grpc::services(&backend);
    // Standard health (Kubernetes gRPC probes, load balancers) and reflection (grpcurl without the .proto).
    let (health_reporter, health) = tonic_health::server::health_reporter();
    let health_task = tokio::spawn(report_health(backend, health_reporter, stop_rx.clone()));
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(sweep_proto::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| ServeError::Reflection(e.to_string()))?;
    let (work, jobs) = limited(work, jobs);
    let result = server
        .layer(crate::metrics::RpcLayer::new(metrics))
        .layer(crate::auth::AuthLayer::new(security.auth))
        .add_service(work)
        .add_service(jobs)
        .add_optional_service(replication)
        .add_service(health)
        .add_service(reflection)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await;
    let _ = stop_tx.send(true);
    let _ = health_task.await;
    if let Some(r) = reloader {
        let _ = r.await;
    }
    result.map_err(Into::into)
}

/// Both services with the message limits every caller gets.
fn limited(
    work: crate::grpc::WorkApi,
    jobs: crate::grpc::JobsApi,
) -> (
    work_server::WorkServer<crate::grpc::WorkApi>,
    jobs_server::JobsServer<crate::grpc::JobsApi>,
) {
    let work = work_server::WorkServer::new(work)
        .max_decoding_message_size(sweep_proto::MAX_REPORT_BYTES)
        .max_encoding_message_size(sweep_proto::MAX_REPORT_BYTES);
    let jobs = jobs_server::JobsServer::new(jobs)
        .max_decoding_message_size(sweep_proto::MAX_REPORT_BYTES)
        .max_encoding_message_size(sweep_proto::MAX_RESULT_BYTES);
    (work, jobs)
}

/// The `Work` and `Jobs` services of `coord` as transports for clients in this process (`sweep run`'s worker
/// and progress bars): the same handlers, message limits and RPC metrics as over the network, no token (as an
/// open coordinator), and no socket or HTTP/2 framing between them. They serve only while the coordinator's
/// background tasks run: [`crate::start()`] without a listener runs them ([`crate::Running::in_process`]).
pub fn in_process(coord: &Arc<Coordinator>) -> (sweep_proto::Transport, sweep_proto::Transport) {
    use tower_layer::Layer;
    let (work, jobs) = crate::grpc::services(&Backend::Single(coord.clone()));
    let (work, jobs) = limited(work, jobs);
    let (rpc, auth) = (
        crate::metrics::RpcLayer::new(coord.metrics.clone()),
        crate::auth::AuthLayer::new(None),
    );
    (
        sweep_proto::transport(rpc.layer(auth.layer(work))),
        sweep_proto::transport(rpc.layer(auth.layer(jobs))),
    )
}

/// How often the health service looks at the store.
const HEALTH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Keeps the standard health service truthful: SERVING (overall, `""`, and per service) while the store works,
/// NOT_SERVING once a write failed, since from then on the coordinator refuses every change until restarted.
/// A member of a replicated coordinator is SERVING overall while it runs (it answers, if only with the
/// leader's address), and its `Work` and `Jobs` are SERVING only while it leads.
async fn report_health(
    backend: Backend,
    reporter: tonic_health::server::HealthReporter,
    mut stop: watch::Receiver<bool>,
) {
    use tonic_health::ServingStatus::{NotServing, Serving};
    let mut tick = tokio::time::interval(HEALTH_EVERY);
    let mut last = None;
    loop {
        let services = match backend.coord() {
            Ok(coord) if coord.store_failure().is_none() => Serving,
            _ => NotServing,
        };
        let overall = match backend {
            Backend::Single(_) => services,
            Backend::Member(_) => Serving,
        };
        if last != Some((overall, services)) {
            reporter.set_service_status("", overall).await;
            for service in [
                <work_server::WorkServer<crate::grpc::WorkApi> as tonic::server::NamedService>::NAME,
                <jobs_server::JobsServer<crate::grpc::JobsApi> as tonic::server::NamedService>::NAME,
            ] {
                reporter.set_service_status(service, services).await;
            }
            last = Some((overall, services));
        }
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::{health_check_response::ServingStatus, HealthCheckRequest};
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::ServerReflectionRequest;

    use super::*;
    use crate::auth::Auth;
    use crate::coordinator::CoordinatorConfig;
    use crate::store::Store;

    const ADMIN: &str = "admin-token-for-the-health-test";

    #[tokio::test]
    async fn health_answers_without_a_token_and_reflection_lists_both_services() {
        let mut admin = tempfile::NamedTempFile::new().unwrap();
        writeln!(admin, "{ADMIN}").unwrap();
        let auth = Auth::from_files(None, Some(admin.path().into()))
            .unwrap()
            .unwrap();
        let coord = Coordinator::open(Store::in_memory(), CoordinatorConfig::default()).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let security = ServeSecurity {
            auth: Some(auth),
            tls: None,
        };
        let server = tokio::spawn(serve(listener, coord, security, async {
            let _ = stopped.await;
        }));
        let channel = tonic::transport::Endpoint::from_shared(url)
            .unwrap()
            .connect()
            .await
            .unwrap();

        // Probes carry no token, and get an answer for the whole server and for each service.
        let mut health = HealthClient::new(channel.clone());
        for service in ["", "sweep.v1.Work", "sweep.v1.Jobs"] {
            let status = health
                .check(HealthCheckRequest {
                    service: service.into(),
                })
                .await
                .unwrap_or_else(|e| panic!("health of `{service}`: {e}"))
                .into_inner()
                .status;
            assert_eq!(status, ServingStatus::Serving as i32, "`{service}`");
        }

        // Reflection needs a token like everything else but health.
        let list = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut open = ServerReflectionClient::new(channel.clone());
        let refused = open
            .server_reflection_info(tokio_stream::iter([list.clone()]))
            .await;
        let refused = match refused {
            Err(status) => status,
            Ok(resp) => match resp.into_inner().message().await {
                Err(status) => status,
                Ok(m) => panic!("reflection answered without a token: {m:?}"),
            },
        };
        assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
        let token: tonic::metadata::MetadataValue<_> = format!("Bearer {ADMIN}").parse().unwrap();
        let mut reflect =
            ServerReflectionClient::with_interceptor(channel, move |mut req: tonic::Request<()>| {
                req.metadata_mut().insert("authorization", token.clone());
                Ok(req)
            });
        let mut answers = reflect
            .server_reflection_info(tokio_stream::iter([list]))
            .await
            .unwrap()
            .into_inner();
        let answer = answers.message().await.unwrap().expect("an answer");
        let Some(MessageResponse::ListServicesResponse(services)) = answer.message_response else {
            panic!("not a service list: {answer:?}");
        };
        let names: Vec<String> = services.service.into_iter().map(|s| s.name).collect();
        assert!(
            names.contains(&"sweep.v1.Work".to_string())
                && names.contains(&"sweep.v1.Jobs".to_string()),
            "{names:?}"
        );

        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
    }
}
