//! What the process knows of one controller, in one place: its name, the resource it
//! reconciles, whether it runs by default, and how to start it.
//!
//! The command line reads the descriptors to check the cluster before starting (is each
//! controller's CRD installed, may the operator list it) and to ask whether the API server
//! streams lists; readiness and metrics know a controller by its name; the [`Manager`] starts
//! it. So adding a controller is its module, which defines its descriptor, and one line in the
//! crate's list of controllers.
//!
//! A descriptor is generic over `C`, the configuration of the whole run: the runtime does not
//! know it, and each controller picks its own settings out of it in `start`.
//!
//! [`Manager`]: super::Manager

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::api::ListParams;
use kube::{Client, CustomResourceExt};

use super::controller::Object;
use super::{Shared, Stopping, scoped, watch};

/// One controller of the operator.
pub struct Descriptor<C> {
    /// Its name in `--controllers`, metrics, logs and readiness reports.
    pub name: &'static str,
    /// Whether it runs when `--controllers` is not given: the controllers of the CRDs
    /// installed by default.
    pub runs_by_default: bool,
    /// The custom resource it reconciles.
    pub resource: OwnResource,
    /// Builds its watches from `config` and returns the controller, to run until the
    /// [`Stopping`] future completes and then finish its reconciles in flight.
    pub start: fn(&Shared, &C, Stopping) -> BoxFuture<'static, ()>,
}

/// A controller's own resource, as the checks before a start see it.
pub struct OwnResource {
    /// Its CRD's name, such as `foos.samplecontroller.k8s.io`.
    pub crd_name: fn() -> &'static str,
    /// Lists at most one of its objects in a namespace (or in all): fails with a 404 when the
    /// CRD is missing and a 403 when the operator may not list them.
    pub probe: fn(Client, Option<String>) -> BoxFuture<'static, Result<(), kube::Error>>,
    /// Whether the API server streams lists of it (see [`watch::serves_streaming_lists`]).
    pub streams_lists: fn(Client, Option<String>) -> BoxFuture<'static, Result<bool, kube::Error>>,
}

impl OwnResource {
    /// The checks of custom resource `K`.
    pub const fn of<K: Object + CustomResourceExt>() -> Self {
        Self {
            crd_name: K::crd_name,
            probe: probe::<K>,
            streams_lists: streams_lists::<K>,
        }
    }
}

fn probe<K: Object>(
    client: Client,
    namespace: Option<String>,
) -> BoxFuture<'static, Result<(), kube::Error>> {
    async move {
        scoped::<K>(&client, namespace.as_deref())
            .list_metadata(&ListParams::default().limit(1))
            .await
            .map(|_| ())
    }
    .boxed()
}

fn streams_lists<K: Object>(
    client: Client,
    namespace: Option<String>,
) -> BoxFuture<'static, Result<bool, kube::Error>> {
    async move { watch::serves_streaming_lists(&scoped::<K>(&client, namespace.as_deref())).await }.boxed()
}
