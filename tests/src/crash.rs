//! Crash injection through the controller's two narrow interfaces, the Kubernetes API client and
//! the [`CloudProvider`]: a [`Crash`] names one step (the n-th successful API request matching a
//! method and path, or the n-th cloud call of a kind). Right after that step has taken effect,
//! the controller freezes: the call never returns, and every later API request or cloud call
//! through the same crash hangs too, so nothing more reaches the world. The test then stops the
//! frozen controller and starts a fresh one, as a killed and restarted process would be.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use async_trait::async_trait;
use controller::cloudprovider::CloudProvider;
use crds::{EC2NodeClass, NodeClaim};
use http::{Method, Request, Response};
use karpenter_core::capacity::InstanceType;
use karpenter_core::cloud::CloudError;
use karpenter_core::cloud::Instance;
use karpenter_core::cloud::Launched;
use karpenter_core::cloud::NodeClassResolution;
use kube::client::Body;

/// Where to crash.
#[derive(Clone, Debug)]
pub enum Step {
    /// After the n-th (1-based) successful API request with this method whose path contains
    /// every one of the fragments.
    Api {
        /// HTTP method.
        method: Method,
        /// Path fragments, e.g. `["/nodeclaims/", "/status"]`.
        path: Vec<String>,
        /// Which match.
        nth: usize,
    },
    /// After the n-th (1-based) cloud call of this kind returned (successfully or not).
    Cloud {
        /// `create`, `delete`, `get`, `list` or `delete_instances`.
        call: &'static str,
        /// Which call.
        nth: usize,
    },
    /// After the first `delete` that answered NodeClaimNotFound: the cloud reported the
    /// instance gone.
    InstanceGone,
}

/// One planned crash, shared by the client layer and the cloud wrapper.
#[derive(Debug)]
pub struct Crash {
    step: Step,
    seen: AtomicUsize,
    fired: AtomicBool,
}

impl Crash {
    /// A crash at `step`.
    pub fn at(step: Step) -> Arc<Crash> {
        Arc::new(Crash {
            step,
            seen: AtomicUsize::new(0),
            fired: AtomicBool::new(false),
        })
    }

    /// Whether the controller has crashed.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    fn api_matches(&self, method: &Method, path: &str) -> bool {
        matches!(&self.step, Step::Api { method: m, path: frags, .. }
            if m == method && frags.iter().all(|f| path.contains(f)))
    }

    fn cloud_matches(&self, call: &str) -> bool {
        matches!(&self.step, Step::Cloud { call: c, .. } if *c == call)
    }

    fn gone_matches(&self, call: &str, result: &Result<(), CloudError>) -> bool {
        matches!(self.step, Step::InstanceGone)
            && call == "delete"
            && matches!(result, Err(CloudError::NodeClaimNotFound(_)))
    }

    /// Count a matching step; fire on the n-th. Returns whether this one fired.
    fn count(&self) -> bool {
        let nth = match &self.step {
            Step::Api { nth, .. } | Step::Cloud { nth, .. } => *nth,
            Step::InstanceGone => 1,
        };
        let seen = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        if seen == nth {
            self.fired.store(true, Ordering::SeqCst);
            return true;
        }
        false
    }

    /// Hang forever: a frozen process.
    async fn freeze<T>() -> T {
        std::future::pending::<T>().await
    }
}

/// A tower layer that crashes a kube client at an API step.
#[derive(Clone)]
pub struct CrashLayer(pub Arc<Crash>);

impl<S> tower::Layer<S> for CrashLayer {
    type Service = CrashService<S>;

    fn layer(&self, inner: S) -> CrashService<S> {
        CrashService {
            inner,
            crash: Arc::clone(&self.0),
        }
    }
}

/// The service [`CrashLayer`] makes.
#[derive(Clone)]
pub struct CrashService<S> {
    inner: S,
    crash: Arc<Crash>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower::Service<Request<Body>> for CrashService<S>
where
    S: tower::Service<Request<Body>, Response = Response<B>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<B>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<B>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let crash = Arc::clone(&self.crash);
        let matches = crash.api_matches(req.method(), req.uri().path());
        let fut = self.inner.call(req);
        Box::pin(async move {
            if crash.fired() {
                return Crash::freeze().await;
            }
            let resp = fut.await?;
            if matches && resp.status().is_success() && crash.count() {
                return Crash::freeze().await;
            }
            Ok(resp)
        })
    }
}

/// A kube client for the API server `config` reaches (e.g. `Sandbox::client_config`, with the
/// sandbox's CA and token) that crashes at `crash`'s step; kube's retries are off.
///
/// Panics: the client stack cannot be built from `config` (a test bug).
pub fn client(mut config: kube::Config, crash: &Arc<Crash>) -> kube::Client {
    config.default_retry = false;
    kube::client::ClientBuilder::try_from(config)
        .expect("client stack")
        .with_layer(&CrashLayer(Arc::clone(crash)))
        .build()
}

/// A cloud that crashes at a cloud step (and freezes once the crash fired anywhere).
pub struct CrashingCloud {
    inner: Arc<dyn CloudProvider>,
    crash: Arc<Crash>,
}

impl CrashingCloud {
    /// Wrap `inner`.
    pub fn new(inner: Arc<dyn CloudProvider>, crash: &Arc<Crash>) -> Arc<CrashingCloud> {
        Arc::new(CrashingCloud {
            inner,
            crash: Arc::clone(crash),
        })
    }

    async fn guard<T>(&self, call: &str, result: T) -> T {
        if self.crash.cloud_matches(call) && self.crash.count() {
            return Crash::freeze().await;
        }
        result
    }

    async fn before(&self) {
        if self.crash.fired() {
            Crash::freeze::<()>().await;
        }
    }
}

#[async_trait]
impl CloudProvider for CrashingCloud {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn create(
        &self,
        claim: &NodeClaim,
        node_class: &EC2NodeClass,
    ) -> Result<Launched, CloudError> {
        self.before().await;
        let r = self.inner.create(claim, node_class).await;
        self.guard("create", r).await
    }

    async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudError> {
        self.before().await;
        let r = self.inner.delete(claim).await;
        if self.crash.gone_matches("delete", &r) && self.crash.count() {
            return Crash::freeze().await;
        }
        self.guard("delete", r).await
    }

    async fn get(&self, provider_id: &str) -> Result<Instance, CloudError> {
        self.before().await;
        let r = self.inner.get(provider_id).await;
        self.guard("get", r).await
    }

    async fn list(&self) -> Result<Vec<Instance>, CloudError> {
        self.before().await;
        let r = self.inner.list().await;
        self.guard("list", r).await
    }

    async fn instance_types(
        &self,
        node_class: &EC2NodeClass,
    ) -> Result<Arc<Vec<Arc<InstanceType>>>, CloudError> {
        self.before().await;
        self.inner.instance_types(node_class).await
    }

    async fn resolve_node_class(&self, node_class: &EC2NodeClass) -> NodeClassResolution {
        self.before().await;
        self.inner.resolve_node_class(node_class).await
    }

    async fn delete_instances(&self, instances: &[Instance]) -> Result<(), CloudError> {
        self.before().await;
        let r = self.inner.delete_instances(instances).await;
        self.guard("delete_instances", r).await
    }

    async fn node_class_deleted(&self, node_class: &EC2NodeClass) -> Result<(), CloudError> {
        self.before().await;
        self.inner.node_class_deleted(node_class).await
    }
}
