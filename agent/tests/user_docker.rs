//! Workload users on the docker runtime, against the real engine: with the agent's workload user
//! (`--workload-user`, here nobody's 65534:65534) a container whose spec has no `user` runs as
//! that uid:gid whatever the image's default user, `exec` in it runs as it too, and every
//! container has `no-new-privileges`; a spec asking for root is refused where root is not
//! allowed, with the flag named, and runs as root where it is. Needs the engine, like
//! runtime_docker.rs (`SHOAL_SKIP_DOCKER_TESTS=1` skips it).

mod runtime_support;

use std::time::Duration;

use bollard::query_parameters::{ListContainersOptionsBuilder, RemoveContainerOptionsBuilder};
use runtime_support::{request, spec};
use shoal::node::runtime::docker::{ensure_busybox_image, DockerConfig, DockerRuntime};
use shoal::node::runtime::exec::ExecRequest;
use shoal::node::runtime::users::{RunAs, WorkloadUsers};
use shoal::node::runtime::Runtime;

const NODE: &str = "dt-users";
const WAIT: Duration = Duration::from_secs(20);

fn container(name: &str, user: Option<&str>) -> std::sync::Arc<shoal::core::spec::WorkloadSpec> {
    let user = user
        .map(|u| format!("user = \"{u}\"\n"))
        .unwrap_or_default();
    spec(&format!(
        "name = \"{name}\"\n{user}[container]\nimage = \"shoal-busybox:latest\"\n\
         pull = \"if-not-present\"\ncommand = [\"sh\", \"-c\", \"exec sleep 300\"]\n\
         [resources]\ncpu = \"100m\"\nmemory = \"16Mi\"\n"
    ))
}

async fn remove_node_containers(docker: &bollard::Docker) {
    let filters = std::collections::HashMap::from([(
        "label".to_string(),
        vec![format!("shoal.node={NODE}")],
    )]);
    let options = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    for c in docker.list_containers(Some(options)).await.unwrap() {
        let force = RemoveContainerOptionsBuilder::new().force(true).build();
        let _ = docker
            .remove_container(c.id.as_deref().unwrap(), Some(force))
            .await;
    }
}

async fn exec_id(rt: &DockerRuntime, handle: &str) -> String {
    let request = ExecRequest {
        command: vec!["id".into(), "-u".into()],
        stdin: false,
        tty: None,
    };
    let mut child = rt.exec(handle, &request).await.expect("exec");
    let mut out = Vec::new();
    while let Some((_, chunk)) = tokio::time::timeout(WAIT, child.output.recv())
        .await
        .expect("exec output")
    {
        out.extend(chunk);
    }
    String::from_utf8_lossy(&out).trim().to_string()
}

#[tokio::test]
async fn containers_run_as_the_workload_user_with_no_new_privileges_and_root_only_if_allowed() {
    if std::env::var("SHOAL_SKIP_DOCKER_TESTS").as_deref() == Ok("1") {
        eprintln!("SHOAL_SKIP_DOCKER_TESTS=1: docker test skipped");
        return;
    }
    let nobody = WorkloadUsers {
        default: Some(RunAs {
            uid: 65534,
            gid: 65534,
        }),
        root_allowed: false,
    };
    let config = |users| {
        let mut config = DockerConfig::new(NODE);
        config.users = users;
        config.standby = false;
        config
    };
    let rt = DockerRuntime::connect(config(nobody))
        .await
        .expect("the Docker engine must answer (or set SHOAL_SKIP_DOCKER_TESTS=1)");
    let docker = rt.docker().await.unwrap();
    ensure_busybox_image(&docker, "shoal-busybox", "latest")
        .await
        .unwrap();
    remove_node_containers(&docker).await;

    let plain = rt
        .start(request(&container("plain", None), 0, NODE))
        .await
        .unwrap();
    let inspected = docker.inspect_container(&plain.handle, None).await.unwrap();
    assert_eq!(
        inspected.config.as_ref().unwrap().user.as_deref(),
        Some("65534:65534")
    );
    let security = inspected
        .host_config
        .unwrap()
        .security_opt
        .unwrap_or_default();
    assert_eq!(security, vec!["no-new-privileges".to_string()]);
    assert_eq!(exec_id(&rt, &plain.handle).await, "65534");

    let refused = rt
        .start(request(&container("rooty", Some("root")), 0, NODE))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("rooty/0") && refused.contains("--allow-root-workloads"),
        "{refused}"
    );
    let refused = rt
        .start(request(&container("zero", Some("0:0")), 0, NODE))
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("--allow-root-workloads"), "{refused}");

    // The test image has no /etc/passwd, so root by number.
    let allowing = DockerRuntime::connect(config(WorkloadUsers {
        root_allowed: true,
        ..nobody
    }))
    .await
    .unwrap();
    let root = allowing
        .start(request(&container("rooty", Some("0:0")), 0, NODE))
        .await
        .unwrap();
    assert_eq!(exec_id(&allowing, &root.handle).await, "0");
    let inspected = docker.inspect_container(&root.handle, None).await.unwrap();
    let security = inspected
        .host_config
        .unwrap()
        .security_opt
        .unwrap_or_default();
    assert_eq!(security, vec!["no-new-privileges".to_string()]);
    remove_node_containers(&docker).await;
}
