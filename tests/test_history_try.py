from history_support import postgres, store_url  # noqa: F401
from runner.history.url import resolve
from runner.history.store import open_store, Query
from runner.history.model import Result, Metric
import datetime

def test_x(store_url):
    s = open_store(resolve(store_url))
    r = Result(key='a', command='run', out_dir='/x', finished_at=datetime.datetime(2026,1,1), metrics=(Metric('fid','',1.0),))
    assert s.add(r) and not s.add(r)
    assert len(s.query(Query())) == 1
    print(s.url.shown())
    s.close()
