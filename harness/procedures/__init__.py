"""procedures"""
