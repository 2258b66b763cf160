"""Which WebHDFS endpoint an hdfs:// location maps to, from Hadoop's configuration files (no server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from twophase.errors import InvalidValueError, UnsupportedStateLocationError
from twophase.storage.hadoop_config import WEBHDFS_URL_ENV, load_hadoop_config, webhdfs_urls
from twophase.storage.state_storage import canonical_location


def site(folder: Path, core: dict[str, str] | None = None, hdfs: dict[str, str] | None = None) -> Path:
    """A HADOOP_CONF_DIR; property names given as Hadoop spells them."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, properties in (("core-site.xml", core), ("hdfs-site.xml", hdfs)):
        if properties is not None:
            body = "".join(f"<property><name>{k}</name><value>{v}</value></property>" for k, v in properties.items())
            (folder / name).write_text(f'<?xml version="1.0"?>\n<configuration>{body}</configuration>\n')
    return folder


@pytest.fixture(autouse=True)
def no_hadoop_environment(monkeypatch):
    for name in ("HADOOP_CONF_DIR", "HADOOP_HOME", WEBHDFS_URL_ENV):
        monkeypatch.delenv(name, raising=False)


def urls(location: str, conf: Path | None = None) -> tuple[str, ...]:
    scheme, rest = location.split("://", 1)
    return webhdfs_urls(scheme, rest.split("/", 1)[0], load_hadoop_config(conf))


def test_without_configuration_the_namenode_host_on_hadoop3s_http_port():
    assert urls("hdfs://nn.example:8020/chk") == ("http://nn.example:9870",)
    assert urls("hdfs://nn.example/chk") == ("http://nn.example:9870",)


def test_webhdfs_uris_carry_the_http_port_themselves():
    assert urls("webhdfs://nn:50070/chk") == ("http://nn:50070",)
    assert urls("swebhdfs://nn:50470/chk") == ("https://nn:50470",)
    assert urls("webhdfs://nn/chk") == ("http://nn:9870",)


def test_the_http_address_next_to_a_matching_rpc_address(tmp_path):
    conf = site(tmp_path, hdfs={"dfs.namenode.rpc-address": "nn:8020", "dfs.namenode.http-address": "nn:50070"})
    assert urls("hdfs://nn:8020/chk", conf) == ("http://nn:50070",)
    assert urls("hdfs://nn/chk", conf) == ("http://nn:50070",)  # 8020 is the default RPC port
    assert urls("hdfs://other:8020/chk", conf) == ("http://other:9870",)  # another cluster: not its address


def test_the_http_address_of_the_default_filesystem_with_a_wildcard_host(tmp_path):
    conf = site(tmp_path, core={"fs.defaultFS": "hdfs://127.0.0.1:41234"},
                hdfs={"dfs.namenode.http-address": "0.0.0.0:43210"})
    assert urls("hdfs://127.0.0.1:41234/chk", conf) == ("http://127.0.0.1:43210",)
    assert urls("hdfs://127.0.0.2:41234/chk", conf) == ("http://127.0.0.2:9870",)


def test_the_http_address_on_the_namenodes_host(tmp_path):
    conf = site(tmp_path, hdfs={"dfs.namenode.http-address": "127.0.0.1:43210"})
    assert urls("hdfs://127.0.0.1:41234/chk", conf) == ("http://127.0.0.1:43210",)


def test_an_ha_nameservice_maps_to_every_namenode(tmp_path):
    conf = site(tmp_path, hdfs={
        "dfs.nameservices": "mycluster,other",
        "dfs.ha.namenodes.mycluster": "nn1, nn2",
        "dfs.namenode.http-address.mycluster.nn1": "host1:9870",
        "dfs.namenode.http-address.mycluster.nn2": "host2:9870",
        "dfs.namenode.http-address.other": "host3:9870",
    })
    assert urls("hdfs://mycluster/chk", conf) == ("http://host1:9870", "http://host2:9870")
    assert urls("hdfs://other/chk", conf) == ("http://host3:9870",)


def test_a_nameservice_without_http_addresses_names_the_missing_key(tmp_path):
    conf = site(tmp_path, hdfs={"dfs.nameservices": "mycluster", "dfs.ha.namenodes.mycluster": "nn1,nn2",
                                "dfs.namenode.http-address.mycluster.nn1": "host1:9870"})
    with pytest.raises(InvalidValueError, match=rf"dfs.namenode.http-address.mycluster.nn2.*{WEBHDFS_URL_ENV}"):
        urls("hdfs://mycluster/chk", conf)


def test_https_only_uses_the_https_addresses(tmp_path):
    conf = site(tmp_path, hdfs={"dfs.http.policy": "HTTPS_ONLY", "dfs.namenode.rpc-address.ns.nn1": "nn:8020",
                                "dfs.namenode.https-address.ns.nn1": "nn:9871"})
    assert urls("hdfs://nn:8020/chk", conf) == ("https://nn:9871",)
    assert urls("hdfs://elsewhere:8020/chk", conf) == ("https://elsewhere:9871",)


def test_the_environment_variable_wins(tmp_path, monkeypatch):
    conf = site(tmp_path, hdfs={"dfs.namenode.http-address": "nn:50070"})
    monkeypatch.setenv(WEBHDFS_URL_ENV, "http://a:1;https://b:2/")
    assert urls("hdfs://nn:8020/chk", conf) == ("http://a:1", "https://b:2")


@pytest.mark.parametrize("value", ["nn:9870", "ftp://nn:21", "http://nn:9870/webhdfs/v1", ";"])
def test_a_bad_override_is_one_line_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(WEBHDFS_URL_ENV, value)
    with pytest.raises(InvalidValueError, match=rf"^{WEBHDFS_URL_ENV}=.*http://host:port"):
        urls("hdfs://nn:8020/chk")


def test_hadoop_conf_dir_and_hadoop_home_are_where_the_files_are(tmp_path, monkeypatch):
    site(tmp_path / "home" / "etc" / "hadoop", hdfs={"dfs.namenode.http-address": "nn:1"})
    site(tmp_path / "conf", hdfs={"dfs.namenode.http-address": "nn:2"})
    monkeypatch.setenv("HADOOP_HOME", str(tmp_path / "home"))
    assert webhdfs_urls("hdfs", "nn:8020") == ("http://nn:1",)
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path / "conf"))
    assert webhdfs_urls("hdfs", "nn:8020") == ("http://nn:2",)


def test_an_unreadable_configuration_file_is_named(tmp_path):
    tmp_path.joinpath("hdfs-site.xml").write_text("<configuration><property>")
    with pytest.raises(InvalidValueError, match=r"hdfs-site.xml could not be read"):
        load_hadoop_config(tmp_path)


def test_hdfs_without_a_namenode_takes_the_default_filesystem(tmp_path, monkeypatch):
    monkeypatch.setenv("HADOOP_CONF_DIR", str(site(tmp_path, core={"fs.defaultFS": "hdfs://nn:8020"})))
    assert canonical_location("hdfs:///user/spark/chk/") == "hdfs://nn:8020/user/spark/chk"


def test_hdfs_without_a_namenode_or_a_default_filesystem_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("HADOOP_CONF_DIR", str(site(tmp_path, core={"fs.defaultFS": "file:///"})))
    with pytest.raises(UnsupportedStateLocationError, match=r"names no namenode, and fs.defaultFS is no hdfs://"):
        canonical_location("hdfs:///chk")
    with pytest.raises(UnsupportedStateLocationError, match="names no namenode"):
        canonical_location("webhdfs:///chk")
