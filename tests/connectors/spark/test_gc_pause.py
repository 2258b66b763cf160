import gc

from connectors.spark.gc_pause import gc_paused


def test_gc_is_paused_inside_nested_blocks_and_restored_after():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_gc_left_disabled_by_the_caller_stays_disabled():
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_heap_left_after_the_first_block_is_frozen_once():
    from connectors.spark import gc_pause

    if not gc_pause._frozen:
        with gc_paused():
            pass
    assert gc_pause._frozen and gc.get_freeze_count() > 0
    gc.unfreeze()  # leave the test process as it was
