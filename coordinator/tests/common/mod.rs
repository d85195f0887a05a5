//! An in-process coordinator serving gRPC on a loopback port, shared by the integration tests that drive it
//! with raw clients (`rpc.rs`, `fuzz_rpc.rs`, `dag.rs`). Each test picks its own configuration.

use std::time::Duration;

use sweep_coordinator::store::Store;
use sweep_coordinator::{serve, Coordinator, CoordinatorConfig};
use sweep_proto::v1::{jobs_client::JobsClient, work_client::WorkClient};
use tokio::sync::oneshot;
use tonic::transport::Channel;

pub struct Server {
    pub url: String,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Opens `store` with `cfg` and serves it on 127.0.0.1, port 0, until [`Server::stop`].
    pub async fn start(store: Store, cfg: CoordinatorConfig) -> Server {
        let coord = Coordinator::open(store, cfg).expect("open coordinator");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            serve(listener, coord, Default::default(), async {
                let _ = stopped.await;
            })
            .await
            .expect("serve");
        });
        Server {
            url,
            stop: Some(stop),
            task,
        }
    }

    /// One connection to the server, for clients of either service (or a raw codec).
    pub async fn channel(&self) -> Channel {
        Channel::from_shared(self.url.clone())
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    #[allow(dead_code)] // not every test file drives both services through typed clients
    pub async fn clients(&self) -> (WorkClient<Channel>, JobsClient<Channel>) {
        let ch = self.channel().await;
        (WorkClient::new(ch.clone()), JobsClient::new(ch))
    }

    /// Stops serving and waits (at most 10 s) until the server has let go of its store.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("server stops")
            .expect("server task");
    }
}
